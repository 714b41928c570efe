"""A checker process's entry point (`python -m pytest_kernelbench.rank JOB_DIR` under torchrun, or
main() in a rank forked by the rank server): it dies with its launcher, takes a Slurm step's
environment, forwards SIGTERM to its candidate and solver processes (their stacks go to their logs),
runs the Checker and leaves through os._exit with the item's error written."""
from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any, NoReturn

from ..protocol import Failure
from .checker import Checker
from .failures import ItemFailed

FORWARD_GRACE_S = 2.0     # at SIGTERM, its solver processes' time to dump their stacks (its end kills them)


def main(argv: list[str] | None = None) -> NoReturn:
    argv = sys.argv[1:] if argv is None else argv
    from ..procs import die_with_parent
    die_with_parent()   # a rank never outlives its launcher (the zygote or torchrun)
    import faulthandler
    import signal
    step_io = None
    if os.environ.get("KB_LAUNCHER") == "slurm":      # a task of a Slurm step (launch/slurm.py)
        from .steps import StepIO, slurm_env
        os.environ.update(slurm_env(os.environ))
        step_io = StepIO()         # before the output goes to the log, and before the candidate forks
    checker = Checker(argv[0], step_io)
    code = 0

    def forward(signum: int, frame: Any) -> None:      # stop the candidate too: its stack goes to its log
        links = [link for link in (checker.link, checker.ref) if link is not None and link.pid > 0]
        for link in links:
            link.cont()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(link.pid, signal.SIGTERM)
        end = time.monotonic() + FORWARD_GRACE_S
        while any(link.alive() for link in links) and time.monotonic() < end:
            time.sleep(0.01)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
    signal.signal(signal.SIGTERM, forward)
    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)   # its own stack, then forward()
    try:
        if os.environ.get("KB_DEV_PROFILE"):    # a dev knob: where the checker's time goes (cProfile stats)
            import cProfile
            cProfile.runctx("checker.run()", globals(), {"checker": checker},
                            os.path.join(os.environ["KB_DEV_PROFILE"], f"checker{checker.rank}-{os.getpid()}.prof"))
        else:
            checker.run()
    except ItemFailed as f:
        code = 3
        checker.files.error(f.category, f.message, f.where, f.exc, f.tb)
    except BaseException as e:  # noqa: BLE001 - anything not caught above is the harness's
        code = 3
        checker.files.error(Failure.HARNESS_ERROR, f"{type(e).__name__}: {e}", "harness", e)
    finally:
        checker.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # skip interpreter/NCCL teardown
