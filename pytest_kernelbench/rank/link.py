"""The checker's hold on its candidate process: start it (forked before anything secret exists in
the checker), talk to it, time its batches, read its outputs, stop it outside its timed windows,
and look at it from outside (its children, its environment).

A batch, as the checker sees it:
  Batch -> (candidate: ready) -> go [window opens] -> the candidate calls, holds the outputs,
  synchronizes, writes Done to the control page, marks done [window closes] -> the checker reads
  the outputs it wants at once (its own copies: read_done), lets them settle, reads them again
  (work deferred past "done" shows as a difference), and only then tells the candidate to release
  them.
A timed window (held=True) opens before the process can see its batch: the Batch is queued while
the process is stopped, and the clock starts before the SIGCONT that lets it read it.
"""
from __future__ import annotations

import os
import signal
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from ..procs import alive, die_with_parent
from ..protocol import Batch, CandidateInit, Done, Exit, Failed, Failure, Imported, Ready, Release, StorePort
from . import outputs, untrusted
from .channel import Channel, ChannelClosed, ControlPage
from .failures import ItemFailed
from .identity import Identity
from .memory import MemoryError_

READY_TIMEOUT_S = 120.0
EXIT_GRACE_S = 5.0
SERVE_WAIT_S = 5.0


@dataclass
class Window:
    """One batch: its wall time (the checker's clock) and what the candidate said at its end."""
    seconds: float
    done: Done
    calls: int
    outputs: dict[int, Any] = field(default_factory=dict)     # call index -> the output as read at "done"
    spans: list[list[tuple[int, int]]] = field(default_factory=list)    # per call: its tensors' bytes, by the checker
    opened: float = 0.0                # perf_counter at "go" and when the checker saw "done" (diagnostics)
    seen: float = 0.0
    closed: float = 0.0                # perf_counter as batch() returned (diagnostics)
    inputs_read: dict[int, Any] = field(default_factory=dict)  # in-place: call index -> its inputs as read at "done"
    read_at: float | None = None       # when `outputs` were read (None: not yet)
    unreadable: str | None = None      # why they could not be read then


class Link:
    def __init__(self, pid: int, chan: Channel, ctrl: ControlPage):
        self.pid, self.chan, self.ctrl = pid, chan, ctrl
        self.seq = 0
        self.layers: list[str] = []
        self.reader: Any = None
        self.stopped = False
        self.pinned = False                # on a core apart from the candidate's: it may spin (cores.py)
        self.spin_done = os.environ.get("KB_DEV_CHECKER_SLEEP") != "1"     # a dev knob (bench/split_knobs.sh)
        self.own: set[int] = set()         # the checker's own other children (its environment watcher)
        self.arenas: dict[int, Any] = {}   # the checker's arenas, by id (rank/memory.py)
        self.exit_asked = False
        self.sent = 0                      # messages sent to its serve loop (it counts those it served)

    # ---- start ----------------------------------------------------------------------------------
    @classmethod
    def start(cls, log_path: str, read_only: list[str], read_write: list[str], sys_path: list[str],
              env: dict[str, str], role: str = "candidate", cuda_device: int | None = None,
              ident: Identity | None = None) -> Link:
        ctrl = ControlPage()
        ours, theirs = socket.socketpair()
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:                                   # the candidate process
            ours.close()
            # gone the moment its checker is (a run killed with -9), even in the middle of a batch:
            # the fork cleared the checker's own death signal, and a batch of slow calls outlived it
            die_with_parent()
            if os.getppid() != parent:
                os._exit(70)
            from .solverboot import main
            main(theirs.fileno(), ctrl, log_fd, read_only, read_write, sys_path, env, role, cuda_device, ident)
            os._exit(70)
        theirs.close()
        os.close(log_fd)
        return cls(pid, Channel(ours), ctrl)

    def expect(self, kind: type, timeout: float | None, what: str) -> tuple[Any, list[int]]:
        """The next message, which must be a `kind` (a Failed is the candidate's own failure)."""
        try:
            msg, fds = self.chan.recv(timeout)
        except ChannelClosed:
            raise ItemFailed(Failure.CRASH, f"the candidate process died {what} ({self.exit_text()})", "candidate") from None
        except TimeoutError:
            raise ItemFailed(Failure.TIMEOUT, f"the candidate process did not answer {what} within {timeout:.0f} s",
                             "candidate") from None
        if isinstance(msg, Failed):     # its own account: only ever a candidate category (untrusted.py)
            f = untrusted.failure_dict({"category": msg.category, "message": msg.message, "traceback": msg.traceback})
            raise ItemFailed(f["category"], f["message"], "candidate", tb=f["traceback"])
        if not isinstance(msg, kind):
            raise ItemFailed(Failure.RUNTIME_ERROR, f"the candidate process broke the protocol {what}: sent "
                             f"{type(msg).__name__}", "candidate")
        return msg, fds

    def ready(self) -> list[str]:
        msg, _ = self.expect(Ready, READY_TIMEOUT_S, "while starting")
        self.layers = list(msg.layers)
        return self.layers

    def init(self, init: CandidateInit, publish_port: Any = None) -> None:
        """Join the candidate group (rank 0's candidate serves its store; `publish_port(port)` tells
        the other checkers) and import the candidate."""
        self.chan.send(init)
        if init.rank == 0:
            msg, _ = self.expect(StorePort, init.setup_timeout_s, "while starting its group's store")
            publish_port(msg.port)

    def imported(self, timeout: float) -> float:
        msg, _ = self.expect(Imported, timeout, "while importing the candidate")
        return untrusted.seconds(msg.import_s)

    def exit_text(self) -> str:
        """How the candidate process ended (it closed the channel: its exit status follows soon)."""
        end = time.monotonic() + 2.0
        while True:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return "its exit status is gone"
            if pid or time.monotonic() > end:
                break
            time.sleep(0.01)
        if not pid:
            return "it closed the channel"
        code = os.waitstatus_to_exitcode(status)
        self.pid = -1
        if code < 0:
            try:
                return f"killed by signal {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"

    # ---- batches --------------------------------------------------------------------------------
    def send(self, msg: object, fds: tuple[int, ...] = ()) -> None:
        self.sent += 1
        try:
            self.chan.send(msg, fds)
        except OSError:
            raise ItemFailed(Failure.CRASH, f"the candidate process died ({self.exit_text()})", "candidate") from None

    def batch(self, calls: list[int], first: bool, spin: bool, barrier: Any, timeout: float, inputs: bool = False,
              read: bool | list[int] = True, stop: bool = False, held: bool = False, module: str = "") -> Window:
        """Run a batch and time it from "go" to "done" (`barrier()` first, across checkers). `read`:
        its outputs will be read (their descriptions are expanded and checked now); a list: only
        those calls' will (a reference window's, read only so that the checker does the same work
        after either side's window). `stop`: the process is stopped the moment "done" has come
        (its wake-up byte: the last thing it sends), before anything else, so that a thread it hid
        has microseconds, not the checker's reading of Done, to start work after "done".
        `held`: the process is stopped now (a timed window, rank/timed.py): the batch is queued
        while it is, the barrier passed and the clock started, and only then is it continued, so
        that nothing of it (its batch loop, a thread it hid) runs between its first sight of the
        window's inputs and the clock's start; there is no "armed" to wait for. `module`: the
        reference process's baseline to call (Batch.module; "": its reference)."""
        self.seq += 1
        seq = self.seq
        self.send(Batch(calls=list(calls), first=first, spin=spin, inputs=inputs, module=module))
        if held:
            barrier()
            t0 = time.perf_counter()
            self.ctrl.mark_go(seq)      # set before it runs: it finds "go" at once
            self.cont()
        else:
            if spin and not self.ctrl.spin(24, seq, time.monotonic() + timeout, self.alive):    # waiting for "go"
                if not self.alive():
                    raise ItemFailed(Failure.CRASH, f"the candidate process died ({self.exit_text()})", "candidate")
                raise ItemFailed(Failure.TIMEOUT, "the candidate process did not take a batch", "candidate")
            barrier()
            t0 = time.perf_counter()
            self.ctrl.mark_go(seq)
        if not spin:
            self.send_poke()
        # "done": spun for where the checker has a core of its own (no wake-up in the window); else
        # slept for (a byte on the socket): a checker spinning beside the candidate took CPU from
        # its calls (+60 % per call at 1 MiB on an H100), which the reference never paid
        if spin and self.pinned and self.spin_done and not self.ctrl.spin(8, seq, time.monotonic() + timeout, self.alive):
            if not self.alive():
                raise ItemFailed(Failure.CRASH, f"the candidate process died in a call ({self.exit_text()})", "candidate")
            raise ItemFailed(Failure.TIMEOUT, f"the candidate did not finish a batch within {timeout:.0f} s", "candidate")
        seconds = time.perf_counter() - t0
        try:
            self.chan.wait_poke(timeout)
        except (ChannelClosed, OSError):
            raise ItemFailed(Failure.CRASH, f"the candidate process died in a call ({self.exit_text()})",
                             "candidate") from None
        except TimeoutError:
            raise ItemFailed(Failure.TIMEOUT, f"the candidate did not finish a batch within {timeout:.0f} s",
                             "candidate") from None
        if not (spin and self.pinned and self.spin_done):
            seconds = time.perf_counter() - t0
        if stop:
            self.stop()
        seen = t0 + seconds
        if self.ctrl.done != seq:
            raise ItemFailed(Failure.RUNTIME_ERROR, f"the candidate process broke the protocol (done mark {self.ctrl.done}, "
                             f"batch {seq})", "candidate")
        done = untrusted.done_of(self.ctrl.payload())     # checked, bounded; else the candidate's runtime_error
        spans: list[list[tuple[int, int]]] = []
        try:
            if read is True:
                done.outputs, spans = outputs.expand(done.outputs, done.layouts)
            elif read and len(done.outputs) == len(calls):
                trees, _ = outputs.expand([done.outputs[i] for i in read], done.layouts)
                some: list[Any] = [None] * len(calls)
                for i, tree in zip(read, trees):
                    some[i] = tree
                done.outputs = some
        except ValueError as e:
            raise ItemFailed(Failure.RUNTIME_ERROR, f"the candidate process broke the protocol (outputs described "
                             f"wrongly: {e})", "candidate") from None
        return Window(seconds, done, len(calls), opened=t0, seen=seen, spans=spans, closed=time.perf_counter())

    def alive(self) -> bool:
        """Whether the candidate process still runs (not exited, not a zombie)."""
        return self.pid > 0 and alive(self.pid)

    def send_poke(self) -> None:
        try:
            self.chan.poke()
        except OSError:
            raise ItemFailed(Failure.CRASH, f"the candidate process died ({self.exit_text()})", "candidate") from None

    def read_inputs(self, window: Window, index: int) -> Any:
        """An in-place call's input set as the candidate left it (Batch.inputs), the checker's copy."""
        self.read(window, [])
        if not 0 <= index < len(window.done.inputs):
            raise MemoryError_(f"the candidate process described {len(window.done.inputs)} input sets, not call {index}'s")
        return untrusted.read(window.done.inputs[index], self.reader)

    def read_done(self, window: Window, indices: list[int]) -> None:
        """The outputs of the given calls read the moment the batch is done, before the checker does
        anything else (into window.outputs): work left running past "done" (a kernel launched after
        the device-wide synchronize, by a thread the candidate hid) would otherwise finish them
        unseen in the pause, or beside the reference's next window. Where they cannot be read yet
        (the batch failed, the protocol broke) nothing is read: the window is judged later."""
        done = window.done
        window.read_at = time.perf_counter()
        if done.failed or done.unsafe or len(done.outputs) != window.calls:
            return
        try:
            window.outputs = self.read(window, indices)
        except MemoryError_ as e:
            window.unreadable = str(e)

    def read(self, window: Window, indices: list[int]) -> dict[int, Any]:
        """The outputs of the given calls, read by the checker now (its own copies)."""
        if window.done.segments and hasattr(self.reader, "add"):     # CUDA allocations: a CPU job has none
            self.reader.add(window.done.segments)
        if window.done.lent and hasattr(self.reader, "lend"):
            self.reader.lend(window.done.lent, self.arenas)
        out = {}
        for i in indices:
            out[i] = untrusted.read(window.done.outputs[i], self.reader)
        return out

    def release(self) -> None:
        self.send(Release())

    def wait_served(self, timeout: float = SERVE_WAIT_S) -> bool:
        """Wait (the process running) until it has served every message sent (a Release: the
        outputs freed; new slots: their sets built): stopped before it had, it would do that work
        at the start of its next timed window, inside the clock (its batch is queued while it is
        stopped). False at the timeout (a process that never says so only slows its own item)."""
        end = time.monotonic() + timeout
        while self.ctrl.served < self.sent:
            if time.monotonic() > end or not self.alive():
                return False
            time.sleep(0.0001)
        return True

    # ---- the process from outside -------------------------------------------------------------------
    def stop(self) -> None:
        """SIGSTOP the candidate's process group while the reference runs: none of its threads or
        children can take CPU from the reference, or launch work beside it."""
        if not self.stopped and self.pid > 0:
            try:
                os.killpg(self.pid, signal.SIGSTOP)
                self.stopped = True
            except (ProcessLookupError, PermissionError):
                pass

    def cont(self) -> None:
        if self.stopped and self.pid > 0:
            try:
                os.killpg(self.pid, signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                pass
            self.stopped = False

    def children(self) -> list[int]:
        """Living processes below the candidate process, or re-parented to the checker (a child that
        double-forked: the checker is their subreaper): during a call, a build tool's time is over,
        so any of them is a violation. Read from each thread's children list (a few small files),
        or, where the kernel has none, from every process's parent."""
        me = os.getpid()
        if not os.path.exists(f"/proc/{me}/task/{me}/children"):
            return self._children_by_scan()
        found: set[int] = set()
        todo = [self.pid, me]
        while todo:
            parent = todo.pop()
            for pid in _task_children(parent):
                if pid in found or pid == self.pid or pid in self.own or not alive(pid):
                    continue
                found.add(pid)
                todo.append(pid)
        return sorted(found)

    def _children_by_scan(self) -> list[int]:
        me = os.getpid()
        found, todo = set(), {self.pid}
        stats = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat") as f:
                        rest = f.read().rsplit(")", 1)[1].split()
                    if alive(int(name)):
                        stats[int(name)] = int(rest[1])
                except (OSError, IndexError):
                    pass
        changed = True
        while changed:
            changed = False
            for pid, ppid in stats.items():
                if pid not in found and pid != self.pid and pid not in self.own and (ppid in todo or ppid == me):
                    found.add(pid)
                    todo.add(pid)
                    changed = True
        return sorted(found)

    def ask_exit(self) -> None:
        if self.exit_asked:
            return
        self.exit_asked = True
        self.cont()
        try:
            self.chan.send(Exit())
        except OSError:
            pass

    def scheduling(self) -> dict:
        """How the process is scheduled: each thread's CPUs, nice value and policy, and its cgroup.
        A candidate process may change these for any process of its user (the reference process
        too, where it can find it): the checker compares them before every reference window."""
        threads = {}
        for tid in threads_of(self.pid):
            try:
                threads[tid] = (sorted(os.sched_getaffinity(tid)), os.getpriority(os.PRIO_PROCESS, tid),
                                os.sched_getscheduler(tid))
            except OSError:       # a thread that just ended
                pass
        try:
            with open(f"/proc/{self.pid}/cgroup") as f:
                cgroup = f.read().strip()
        except OSError:
            cgroup = ""
        return {"threads": threads, "cgroup": cgroup}

    def close(self) -> None:
        """Tell the candidate to exit, wait a little, then kill its process group."""
        self.ask_exit()
        end = time.monotonic() + EXIT_GRACE_S
        while self.pid > 0 and time.monotonic() < end:
            try:
                pid, _ = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                break
            if pid:
                self.pid = -1
                break
            time.sleep(0.01)
        if self.pid > 0:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in self.children():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def threads_of(pid: int) -> list[int]:
    """The thread ids of a process ([] once it is gone)."""
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def _task_children(pid: int) -> list[int]:
    """The children of every thread of a process (/proc/<pid>/task/<tid>/children)."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            pass
    return out

