"""The host allocator of the two solver processes, set alike and steady before any call is timed.

glibc serves a large host allocation (a `.cpu()` result of a few MiB) with a fresh mmap and
returns it on free, and trims the heap's free top back to the system, so a call that makes host
tensors pays first-touch page faults each window; whether the kernel backs such a mapping with
huge pages (one fault, not 512) depends on where the mapping lands, which differs per process.
The same reference code then read 1.4 ms a call in one solver process and 1.85 ms in the other
(device_to_host_fifo, large, one H100), in either direction from run to run. Fixed thresholds (no
mmap below 32 MiB, no trimming) make host memory, once touched, be reused in both: what a
long-running process settles into, and the same for reference and candidate."""
from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20          # glibc's ceiling for it on 64-bit
TRIM_THRESHOLD = (1 << 31) - 1     # never trim


def steady() -> bool:
    """Set the thresholds in this process (False where the C library is not glibc or refuses)."""
    if os.environ.get("KB_DEV_MALLOC_DEFAULT") == "1":     # a dev knob (bench/host_alloc_probe.py)
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
