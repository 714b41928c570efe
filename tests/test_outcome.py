"""outcome: dead ranks and their exits read from torchrun's failure summary."""
from __future__ import annotations

from pytest_kernelbench import outcome


TORCHRUN_SUMMARY = """Failures:
[1]:
  time      : 2026-11-21_05:15:31
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -11 (pid: 8611)
  error_file: <N/A>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 0 (local_rank: 0)
  exitcode  : 3 (pid: 8610)
"""


def test_dead_ranks_are_read_from_torchrun_summary():
    from pytest_kernelbench.launch import torchrun
    assert torchrun._dead_ranks(TORCHRUN_SUMMARY) == [(1, -11), (0, 3)]
    assert outcome._describe_exit(-11) == "signal SIGSEGV"
