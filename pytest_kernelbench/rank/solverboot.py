"""A solver process's life from the fork to serving its checker (rank/candidate.py serves): its own
process group and file descriptors, its environment, the sandbox (sandbox.py) before any of its
code runs, its CUDA context, then the checker's CandidateInit: the group joined and the candidate
(or, in the reference process, the reference and its baselines) imported. Split from candidate.py,
which holds what it does once it serves."""
from __future__ import annotations

import faulthandler
import os
import signal
import sys
import traceback

from ..procs import mark
from ..protocol import CandidateInit, Exit, Failure, Isolation, Ready
from . import hostmem
from .candidate import CandidateProcess, _Stop
from .channel import Channel, ChannelClosed, ControlPage
from .identity import Identity, dumpable


def main(sock_fd: int, ctrl: ControlPage, log_fd: int, read_only: list[str], read_write: list[str],
         sys_path: list[str], env: dict[str, str], role: str = "candidate", cuda_device: int | None = None,
         ident: Identity | None = None) -> None:
    """The forked child's life; leaves through os._exit. Runs before anything secret exists in
    the parent, so its memory holds nothing worth reading. `ident`: the uid/gid it runs under."""
    import socket
    code = 0
    try:
        os.setsid()                        # its own process group: the checker stops it as one
        keep = {sock_fd, ctrl.fd, log_fd}
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.closerange(3, min(sock_fd, ctrl.fd, log_fd))
        for fd in _open_fds():
            if fd > 2 and fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)   # where it was, when stopped
        sys.argv = ["kernelbench-candidate"]
        os.environ.update(env)             # home, temporary and cache folders inside its own scratch
        import tempfile
        tempfile.tempdir = None            # re-read TMPDIR: a value cached before the fork names a folder it cannot write
        os.chdir(env.get("HOME", "/"))
        from .sandbox import harden, nondumpable
        hostmem.steady()                   # both solver processes' host allocator alike (rank/hostmem.py)
        mark(f"{role}: forked")
        layers = harden(read_only, read_write, ident)
        mark(f"{role}: hardened")
        os.chdir(env.get("HOME", "/"))     # as its mount namespace shows it
        if role != "candidate":     # the reference process: out of a candidate's reach even without Landlock
            nondumpable()
        elif Isolation.UID.value in layers:
            dumpable(True)          # its own /proc/self again (the uid change made it root's)
        sys.path[:0] = [p for p in sys_path if p not in sys.path]
        chan = Channel(socket.socket(fileno=sock_fd))
        proc = CandidateProcess(chan, ctrl, layers, role)
        chan.send(Ready(os.getpid(), layers))
        if cuda_device is not None:      # the CUDA context now, while the checker makes its own
            try:
                import torch
                torch.cuda.set_device(cuda_device)
                torch.zeros(1, device=torch.device("cuda", cuda_device))
            except Exception:  # noqa: BLE001 - init() tries again and says why
                pass
        try:
            mark(f"{role}: context")
            msg, _ = chan.recv()
            mark(f"{role}: init received")
            if not isinstance(msg, CandidateInit):
                raise _Stop(Failure.RUNTIME_ERROR, "the checker sent no CandidateInit")
            try:
                proc.init(msg)
            except Exception as e:  # noqa: BLE001 - the group or the device did not come up
                raise _Stop(Failure.RUNTIME_ERROR, f"joining the candidate group: {type(e).__name__}: {e}",
                            traceback.format_exc()) from None
            mark(f"{role}: group")
            proc.import_candidate()
            mark(f"{role}: imported")
        except _Stop as stop:
            chan.send(stop.failed)
            while not isinstance(chan.recv()[0], Exit):     # the checker ends the job
                pass
            os._exit(0)
        proc.serve()
    except (ChannelClosed, BrokenPipeError):
        code = 0
    except BaseException:  # noqa: BLE001 - the checker sees the channel close and the log says why
        traceback.print_exc()
        code = 70
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _open_fds() -> list[int]:
    try:
        return [int(f) for f in os.listdir("/proc/self/fd")]
    except OSError:
        return []
