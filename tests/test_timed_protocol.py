"""A size's timed part (rank/timed.py) driven against stand-ins for the two solver processes, in
one process: the order in which the checker stops them, reads their outputs and does its own
work. What runs in the candidate process between its windows is modelled as work that happens
whenever the checker does something while that process is not stopped (a thread it hid, a
kernel it queued). Last, Link.batch's own stop, against a thread in the process's place."""
from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

from pytest_kernelbench.protocol import Done, TimingSpec
from pytest_kernelbench.rank import timed
from pytest_kernelbench.rank.failures import AgreedFailure, ItemFailed
from pytest_kernelbench.rank.link import Link, Window
from pytest_kernelbench.rank.timing import LONE_PAIRS

N = 64      # elements of the one input tensor; the answer is 2 x the input


class Solver(Link):
    """A solver process: answers from the slots it was lent; `late`: its later calls return zeros
    and the answers are copied in the next time it runs outside a window."""

    def __init__(self, role: str, log: list, slots: list, late: bool = False, inplace: str | None = None):
        self.role, self.log, self.slots, self.late = role, log, slots, late
        self.inplace = inplace      # "honest": doubles its inputs in place and returns their sum; "lazy": only returns it
        self.ins: dict[int, list] = {}
        self.stopped, self.reader = False, object()
        self.outs: dict[int, list] = {}
        self.unfinished: list = []
        self.probe_s = None         # what the process says its probe before a window took (foreign.py)

    def stop(self) -> None:
        if not self.stopped:        # as Link.stop: once
            self.stopped = True
            self.log.append(f"stop {self.role}")

    def cont(self) -> None:
        self.stopped = False
        self.log.append(f"cont {self.role}")

    def runs(self) -> None:
        """The checker did something: a process not stopped got to run meanwhile."""
        if not self.stopped:
            for out, answer in self.unfinished:
                out.copy_(answer)
            self.unfinished.clear()

    def batch(self, calls, first, spin, barrier, timeout, inputs=False, read=True, stop=False, held=False) -> Window:
        if held:        # as Link.batch: queued while stopped, continued once the clock runs
            assert self.stopped, f"a timed {self.role} window found its process running before the clock started"
            self.cont()
        assert not self.stopped, f"a {self.role} window started with its process stopped"
        self.log.append(f"batch {self.role}")
        outs = []
        for i in calls:
            if self.inplace:
                if self.inplace == "honest":
                    self.slots[i][0].mul_(2)
                    outs.append(self.slots[i][0].sum())
                else:
                    outs.append((self.slots[i][0] * 2).sum())
                continue
            answer = self.slots[i][0] * 2
            if self.late and i > 0:
                out = torch.zeros_like(answer)
                self.unfinished.append((out, answer))
            else:
                out = answer
            outs.append(out)
        done = Done(outputs=[None] * len(calls), probe_s=self.probe_s, inputs=[None] * len(calls) if inputs else [])
        window = Window(0.0001 * len(calls), done, len(calls))
        self.outs[id(window)] = outs
        self.ins[id(window)] = [(self.slots[i][0].clone(),) for i in calls]      # the inputs as they are at "done"
        if stop:        # as Link.batch: the moment "done" has come
            self.stop()
        return window

    def read(self, window: Window, indices: list[int]) -> dict:
        self.runs()
        self.log.append(f"read {self.role}")
        return {i: self.outs[id(window)][i].clone() for i in indices}

    def wait_served(self) -> bool:
        assert not self.stopped, f"waited for the stopped {self.role} process to serve its messages"
        self.log.append(f"served {self.role}")
        return True

    def read_inputs(self, window: Window, index: int) -> tuple:
        return self.ins[id(window)][index]

    def release(self) -> None:
        self.log.append(f"release {self.role}")

    def children(self) -> list[int]:
        return []


class Arena:
    def __init__(self, nbytes: int):
        self.base, self.nbytes = torch.zeros(nbytes, dtype=torch.uint8), nbytes


def _size_run(late: bool = False, inplace: str | None = None):
    log: list = []
    slots: list = []        # the lent input sets, as both solvers and the checker see them
    cand, ref = Solver("candidate", log, slots, late, inplace), Solver("reference", log, slots, inplace=inplace and "honest")
    made = [0]

    def checker_works(what: str) -> None:
        cand.runs()
        ref.runs()
        log.append(what)

    def make_inputs(size, what):
        checker_works("make inputs")
        made[0] += 1
        return (torch.full((N,), float(made[0])) + torch.arange(N, dtype=torch.float32),)

    def call_reference(args, phase, beat=True):
        checker_works("reference call")
        if inplace:
            return args[0].mul_(2).sum()
        return args[0] * 2

    def die(category, message, where, exc=None):
        raise ItemFailed(category, message, where)

    c = SimpleNamespace(key="k", ref=ref, rank=0, world=1, device=torch.device("cpu"), harness=None, make_inputs=make_inputs,
                        call_reference=call_reference, die=die, agree_max=lambda x: x, agree=lambda x: [x],
                        barrier=lambda: None, batch_timeout=lambda: 10.0, sync=lambda: checker_works("sync"),
                        reference_untouched=lambda phase: None, files=SimpleNamespace(heartbeat=lambda text: None))
    run = SimpleNamespace(c=c, size="small", link=cand, torch=torch, cuda=False, spin=False, record={}, pending=None,
                          verdict_now=None, lent_layout=[],
                          job=SimpleNamespace(device="cpu", inplace=bool(inplace), tolerance={"atol": 0, "rtol": 0},
                                              timing=TimingSpec.for_device("cpu"), baselines={}))

    def lend(sets, reference=False):
        # both processes read the sets' descriptions as they come: one stopped would leave a
        # message of thousands of them filling its socket, and the checker waiting on it
        assert not (cand.stopped or ref.stopped), "sets lent to a stopped process"
        log.append(f"lend {len(sets)}")
        stride = N * 4
        arena = Arena(len(sets) * stride)
        run.lent_layout = [(arena, stride)]
        slots[:] = [(arena.base[k * stride:(k + 1) * stride].view(torch.float32),) for k in range(len(sets))]
        for slot, s in zip(slots, sets):
            slot[0].copy_(s[0])
        return list(slots)

    def inspect(window, indices, phase, first, settle=True):     # as SizeRun.inspect: at "done" if read then
        return window.outputs if getattr(window, "read_at", None) is not None else run.link.read(window, indices)

    def settled(window, indices, outs, phase, since=None):
        again = run.link.read(window, indices)
        if any(not torch.equal(again[i], outs[i]) for i in indices):
            die("runtime_error", f"{phase}: changed after solution() returned", "candidate")

    def fail_if_any(everyone, phase):
        bad = [v for v in everyone if v["category"]]
        if bad:
            raise AgreedFailure({"category": bad[0]["category"], "message": bad[0]["message"]}, run.record)

    run.lend, run.inspect, run.settled, run.fail_if_any = lend, inspect, settled, fail_if_any
    run.inputs_after = lambda window, k, lent: lent
    return run, log


def test_each_window_ends_with_its_process_stopped_and_its_checked_outputs_read_before_anything_else(monkeypatch):
    run, log = _size_run()
    from pytest_kernelbench.rank import slots as slots_module
    copy_all = slots_module.compare.copy_all
    monkeypatch.setattr(slots_module.compare, "copy_all", lambda pairs: (log.append("slots written"), copy_all(pairs)))
    timed.time_size(run, torch.zeros(N))
    assert run.record["speedup"] is not None
    assert [e for e in log if e.startswith("lend ")] == ["lend 24", "lend 100"]     # the probes', then the rounds'
    batches = [i for i, e in enumerate(log) if e.startswith("batch ")]
    timed_windows = [i for i in batches if log[i - 1] == f"cont {log[i].split()[1]}"]
    assert sum(log[i] == "batch candidate" for i in timed_windows) >= run.job.timing.rounds
    for i in batches:
        role = log[i].split()[1]
        if i in timed_windows:      # stopped the moment it is done, its checked outputs read at once
            assert log[i + 1:i + 3] == [f"stop {role}", f"read {role}"], log[i - 2:i + 4]
        else:                       # after the timed part (anti-caching passes): read at once
            assert log[i + 1] == f"read {role}", log[i - 2:i + 3]
    # while the timed part runs, the candidate process is stopped whenever new values reach the
    # slots, the checker runs the reference and the reference process runs its window (it runs
    # outside its windows only while the checker makes new values, before any reaches a slot)
    first, last = log.index("stop candidate"), timed_windows[-1]
    candidate_stopped, written = True, 0
    for e in log[first:last]:
        if e in ("stop candidate", "cont candidate"):
            candidate_stopped = e == "stop candidate"
        elif e in ("slots written", "reference call", "batch reference"):
            assert candidate_stopped, f"{e} while the candidate process ran"
            written += e == "slots written"
    assert written >= run.job.timing.rounds
    # stopped outside a window only once it has served what it was sent (outputs to free, new
    # slots): else that work would run at the start of its next window, inside the clock
    for i, e in enumerate(log[first:last], first):
        role = e.split()[-1]
        conts = [j for j in range(first, i) if log[j] == f"cont {role}"]
        if e.startswith("stop ") and conts and not log[i - 1].startswith("batch "):
            assert f"served {role}" in log[conts[-1]:i], log[conts[-1]:i + 1]


def test_outputs_a_candidate_finishes_after_done_are_read_unfinished():
    # on the code before read_done and the stopped candidate process, the checker read a window's
    # outputs only after the round's other window or its own work, and the late copies were in
    run, log = _size_run(late=True)
    with pytest.raises(AgreedFailure) as failed:
        timed.time_size(run, torch.zeros(N))
    assert failed.value.failure["category"] == "mismatch"
    assert "timed call" in failed.value.failure["message"]


@pytest.mark.parametrize("inplace", ["honest", "lazy"])
def test_timed_in_place_calls_are_compared_as_left_at_done(inplace):
    # before issue 44, check_window skipped in-place problems (the slots would be restored by the
    # time it ran): a candidate that did nothing to its inputs in timed calls passed; now their
    # inputs are read at "done" and compared with the reference's run on the pristine values
    run, log = _size_run(inplace=inplace)
    if inplace == "honest":
        timed.time_size(run, torch.zeros(()))
        assert run.record["speedup"] is not None
        return
    with pytest.raises(AgreedFailure) as failed:
        timed.time_size(run, torch.zeros(()))
    assert failed.value.failure["category"] == "mismatch"
    assert "timed call" in failed.value.failure["message"] and "in-place result wrong" in failed.value.failure["message"]


@pytest.mark.parametrize("side, probe_s, fails", [
    ("reference", 0.0020, True),        # other work held the GPU when every window began
    ("reference", 0.00008, False),      # an idle GPU
    ("reference", 0.00116, False),      # slower, still under another context's time slice
    ("candidate", 0.0024, False),       # the candidate process's own say is not evidence
])
def test_the_reference_windows_began_on_a_gpu_other_work_held(side, probe_s, fails):
    # on the code before rank/foreign.py, nothing looked at the GPU before the reference's windows:
    # GPU work the candidate left running after "done" (in a second CUDA context, say) passed
    run, log = _size_run()
    (run.c.ref if side == "reference" else run.link).probe_s = probe_s
    if not fails:
        timed.time_size(run, torch.zeros(N))
        probe = run.record["timing"]["gpu_probe"][side]
        assert probe["windows"] > run.job.timing.rounds and probe["slow"] == (probe["windows"] if side == "candidate" else 0)
        return
    with pytest.raises(AgreedFailure) as failed:
        timed.time_size(run, torch.zeros(N))
    assert failed.value.failure["category"] == "runtime_error"
    windows = run.job.timing.rounds + 3 + LONE_PAIRS       # the rounds', warm-up's, probes' and lone calls'
    assert failed.value.failure["message"].startswith(f"other GPU work was running when {windows} "
                                                      "of the reference's")
    assert "left running after" in failed.value.failure["message"]


@pytest.mark.parametrize("slow, windows, fails", [(2, 2, False), (3, 3, True), (3, 16, False), (4, 16, True),
                                                 (2, 67, False), (13, 67, False), (14, 67, True)])
def test_a_size_fails_when_a_fifth_of_the_reference_windows_began_on_a_busy_gpu(slow, windows, fails):
    # the speedup is a median over rounds: a few slow probes (host pauses: at most 2 in a size on an
    # honest H100 run) do not fail a size; a fifth of them, and at least three, do
    from pytest_kernelbench.rank import foreign
    tally = foreign.Tally()
    for k in range(windows):
        tally.add(0.0021 if k < slow else 0.00006)
    tally.add(None)         # a CPU window, or a probe that could not run: not counted
    assert (tally.failure() is not None) == fails
    assert tally.record() == {"windows": windows, "slow": slow, "slowest_ms": 2.1}


def test_a_batch_asked_to_stop_stops_the_process_once_done_has_come_before_reading_what_it_said(monkeypatch):
    # Link.batch itself, against a thread in the candidate process's place: the stop comes after
    # the process's wake-up byte (so it cannot be stopped before sending it) and before the checker
    # decodes Done, so a thread it hid has microseconds, not the decoding, to act after "done"
    import socket
    import threading

    from pytest_kernelbench.protocol import encode
    from pytest_kernelbench.rank import untrusted
    from pytest_kernelbench.rank.channel import Channel, ControlPage

    events: list = []

    class Stoppable(Link):
        def stop(self) -> None:
            events.append("stop")

    def candidate(sock, ctrl):
        chan = Channel(sock)
        chan.recv()                 # the Batch
        chan.wait_poke()            # "go" (CPU batches)
        ctrl.put_done(1, encode(Done(outputs=[None])))
        events.append("done")
        chan.poke()

    real_decode = untrusted.decode      # Link.batch reads Done through rank/untrusted.py
    monkeypatch.setattr(untrusted, "decode", lambda data: (events.append("decode"), real_decode(data))[1])
    for stop in (True, False):
        events.clear()
        ours, theirs = socket.socketpair()
        ctrl = ControlPage()
        helper = threading.Thread(target=candidate, args=(theirs, ctrl))
        helper.start()
        window = Stoppable(os.getpid(), Channel(ours), ctrl).batch([0], first=False, spin=False, barrier=lambda: None,
                                                                   timeout=10.0, read=False, stop=stop)
        helper.join()
        ctrl.close()
        ours.close()
        theirs.close()
        assert window.calls == 1
        assert events == (["done", "stop", "decode"] if stop else ["done", "decode"])


def test_a_held_batch_starts_the_clock_before_the_process_can_read_it():
    # before issue 44 the clock started at "go", after the process had the batch (and, spinning,
    # had said "armed"): a batch loop that computed every call on receipt had them done before the
    # clock. Now the batch is queued while the process is stopped and the clock starts before the
    # SIGCONT: what the process does first (reading the batch) comes after the window opened
    import socket
    import threading
    import time

    from pytest_kernelbench.protocol import encode
    from pytest_kernelbench.rank.channel import Channel, ControlPage

    running, seen = threading.Event(), []

    class Held(Link):
        def cont(self) -> None:         # the SIGCONT: the stand-in process may run from here on
            self.stopped = False
            running.set()

        def stop(self) -> None:
            self.stopped = True

    def process(sock, ctrl, spin):
        chan = Channel(sock)
        running.wait(10)
        chan.recv()                     # the Batch, read only once it runs
        seen.append(time.perf_counter())
        if spin:
            ctrl.spin(0, 1, time.monotonic() + 10)
        else:
            chan.wait_poke()
        ctrl.put_done(1, encode(Done(outputs=[None])))
        chan.poke()

    for spin in (False, True):
        running.clear()
        seen.clear()
        ours, theirs = socket.socketpair()
        ctrl = ControlPage()
        helper = threading.Thread(target=process, args=(theirs, ctrl, spin))
        helper.start()
        link = Held(os.getpid(), Channel(ours), ctrl)
        link.stopped = True
        window = link.batch([0], first=False, spin=spin, barrier=lambda: None, timeout=10.0, read=False, held=True)
        helper.join()
        ctrl.close()
        ours.close()
        theirs.close()
        assert window.opened <= seen[0] and window.seconds >= seen[0] - window.opened
