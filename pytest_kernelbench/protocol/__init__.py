"""The contract between the pytest process and the rank processes. Standard library only: both
sides import it (the ranks before torch), and `python -c "import pytest_kernelbench.protocol"`
works anywhere. One vocabulary, in three modules, all names read as `protocol.X`:

- vocabulary.py: `Failure` and `Outcome`: every category a record can carry, used by every producer
  and by the metrics; `RULES`, the checks stricter than ParallelKernelBench's that a failure may
  name; dispositions, tiers; the environment every job's processes get (multicast off).
- job.py: `JobSpec` (with `TimingSpec`): what one torchrun job runs, written as job.json by the
  launcher and read by every rank; one set of defaults, unknown fields refused. The job folder's
  layout (`JobLayout`), the done mark that makes a result trusted, the heartbeat mark of setup
  time, and the two small helpers both sides need (atomic writes, the child PYTHONPATH).
- messages.py: inside a rank, the typed messages between the checker (trusted) and its candidate
  process, and the names of the protections in force.
"""
from .vocabulary import *  # noqa: F403
from .job import *  # noqa: F403
from .messages import *  # noqa: F403
