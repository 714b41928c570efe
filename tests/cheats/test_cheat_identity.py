"""Red team of issue 44, class 1: the candidate process ran as uid 0 without capabilities, with
/proc, /sys and /dev in full under Landlock. For uid 0 the kernel's rules there are file modes: it
could open kernel.core_pattern (a crash then runs a helper of its choosing as real root), a CPU's
online file, /dev/cpu_dma_latency, /dev/kmsg and the autogroup files of its checker and of the
reference process for writing, and renice the reference. Now it runs under a uid of its own.

The candidate only OPENS for writing and closes at once: it never writes (CI runs as root on a
shared machine; an open of /dev/cpu_dma_latency holds the default request until it is closed).
It computes the right answer either way, so the item passes and its log says what it could do.
"""
from __future__ import annotations

import glob
import os

import pytest
from cheatlib import HONEST, item, rank_logs

pytestmark = pytest.mark.e2e

CPU_ONLINE = next(iter(sorted(glob.glob("/sys/devices/system/cpu/cpu[1-9]*/online"))), "")
SYSTEM_FILES = ["/proc/sys/kernel/core_pattern", "/dev/cpu_dma_latency", "/dev/kmsg"] + ([CPU_ONLINE] if CPU_ONLINE else [])

PROBE = HONEST + f'''
import os
def _siblings():       # the checker's other child: the reference process
    me, parent = os.getpid(), os.getppid()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me:
            try:
                with open(f"/proc/{{name}}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == parent:
                        found.append(int(name))
            except (OSError, ValueError, IndexError):
                pass
    return found
def _opens(what, path):
    try:
        os.close(os.open(path, os.O_WRONLY))       # opened and closed: nothing is written
        print("KBID", what, "OPENS", flush=True)
    except OSError as e:
        print("KBID", what, "refused", e.strerror, flush=True)
def _renice(what, pid):
    try:
        os.setpriority(os.PRIO_PROCESS, pid, os.getpriority(os.PRIO_PROCESS, pid))   # its own value: no change
        print("KBID", what, "OPENS", flush=True)
    except OSError as e:
        print("KBID", what, "refused", e.strerror, flush=True)
print("KBID uid", os.getuid(), flush=True)
for _p in {SYSTEM_FILES!r}:
    _opens(_p, _p)
_opens("checker autogroup", f"/proc/{{os.getppid()}}/autogroup")
_renice("checker setpriority", os.getppid())
_ref = _siblings()
print("KBID reference found", len(_ref), flush=True)
for _pid in _ref:
    _opens("reference autogroup", f"/proc/{{_pid}}/autogroup")
    _renice("reference setpriority", _pid)
def solution(x):
    return _p2p_sum(x)
'''

CHEATS = {"identity_probe": PROBE}


@pytest.mark.skipif(os.geteuid() != 0, reason="a candidate changes identity only where the checker is root")
def test_the_candidate_cannot_open_system_files_or_reach_the_reference(judged):
    it = item(judged, "identity_probe")
    assert it["outcome"] == "passed", (it["outcome"], it.get("message"))
    lines = [ln for ln in rank_logs(it).splitlines() if ln.startswith("KBID ")]
    found = [ln for ln in lines if ln.startswith("KBID reference found")]
    assert len(found) == 2 and all(int(ln.split()[-1]) >= 1 for ln in found), lines    # it met the reference, on each rank
    for what in [*SYSTEM_FILES, "checker autogroup", "checker setpriority", "reference autogroup",
                 "reference setpriority"]:
        seen = [ln for ln in lines if ln.startswith(f"KBID {what} ")]
        assert len(seen) >= 2, (what, lines)                 # on each of the two ranks
        assert all(" refused " in ln for ln in seen), lines
    assert not any(ln.startswith("KBID uid 0") for ln in lines), lines
    assert "uid" in (it.get("isolation") or []), it.get("isolation")
