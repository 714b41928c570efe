"""Another process's work on the GPU when a timed window starts (issue 21).

Work a candidate leaves running on the GPU after "done" (a kernel a hidden thread queued in the
microseconds before the stop, a side stream in a process whose device-wide synchronize it undid,
a kernel in a second CUDA context, which that synchronize does not cover) writes no output the
checks could catch. Processes do not run kernels side by side: the GPU time-slices between their
contexts, so such work can take time from the reference's windows.

So before each window's "armed" (outside the timed part) the solver process runs a one-element
kernel and waits for it. On an idle GPU that takes 10-100 us. On one H100
(reports/baselines/2026-11-27-h100x1-linger.md):
- beside another process's running kernel (bench/linger_probe.py), every such kernel coming from
  an idle process waited 2.37-2.50 ms (a time slice), and a copy ran 1.82x slower;
- in a job, a kernel that a second context of the candidate process left spinning from each of
  its windows' ends to its next window's start made the reference process's kernel wait 1.9-2.1 ms
  before 62 of 67 windows;
- the reference against itself: 5 of 1916 windows over 1.5 ms (host pauses), at most 2 in a size.
The reference process is trusted (the candidate cannot reach it), so its probes are evidence; the
candidate process's are diagnostics. Not seen: work that becomes runnable only after the probe,
behind a stream wait on memory written during the reference's window (an in-place problem's inputs).
"""
from __future__ import annotations

import time
from typing import Any

PROBE_SLOW_S = 0.0015
# A size fails when at least FAIL_AT and FAIL_FRACTION of the reference's windows began on a busy
# GPU: the speedup is the median of the rounds' paired ratios, so work that reaches fewer than a
# fifth of the reference's windows barely moves it, and the rare host pause fails nothing.
FAIL_AT = 3
FAIL_FRACTION = 0.2


class Probe:
    """Solver side (CUDA): how long a one-element kernel takes to run, from launch to seen done."""

    def __init__(self, torch: Any, device: Any):
        self.one = torch.zeros(1, device=device)
        self.event = torch.cuda.Event()
        self()          # the kernel's first launch loads it (10-20 ms): not in a window's probe

    def __call__(self) -> float:
        t = time.perf_counter()
        self.one.add_(1)
        self.event.record()
        self.event.synchronize()
        return time.perf_counter() - t


class Tally:
    """Checker side: one side's windows of a size, and those that began on a busy GPU."""

    def __init__(self) -> None:
        self.windows = self.slow = 0
        self.slowest = 0.0

    def add(self, probe_s: Any) -> None:
        if not isinstance(probe_s, (int, float)) or isinstance(probe_s, bool):
            return
        self.windows += 1
        self.slowest = max(self.slowest, float(probe_s))
        self.slow += probe_s > PROBE_SLOW_S

    def failure(self) -> str | None:
        """Why the size's timing fails (reference windows only), or None."""
        if self.slow < max(FAIL_AT, FAIL_FRACTION * self.windows):
            return None
        return (f"other GPU work was running when {self.slow} of the reference's {self.windows} "
                f"windows began (a one-element kernel waited up to {self.slowest * 1e3:.1f} ms for the GPU): work the "
                "candidate left running after \"done\" (in any CUDA context: a window's work must be finished when "
                "it reports done), or another program using this GPU")

    def record(self) -> dict:
        return {"windows": self.windows, "slow": self.slow, "slowest_ms": round(self.slowest * 1e3, 3)}
