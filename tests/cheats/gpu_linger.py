"""A candidate for all_reduce at W = 1 (the sum over one rank is a copy) that leaves GPU work running
after "done": red-team input of tests/cheats/test_gpu_w1_cheats.py and `bash bench/gpu_split.sh late`
(never imported by the tests themselves)."""
import ctypes
import time

import torch
# a kernel in a second CUDA context of this process (spinning for ns nanoseconds or until *flag != 0), launched at the end of each of its windows: it
# spins (a GPU time slice at a time) until the next of its windows begins, so the reference's
# windows share the GPU with it and its own do not; the device-wide synchronize at "done" covers
# the primary context only
PTX = b"""
.version 7.8
.target sm_90
.address_size 64
.visible .entry spin(.param .u64 flag, .param .u64 ns)
{
    .reg .pred %p, %q;
    .reg .b64 %t0, %t1, %d, %lim, %f;
    .reg .b32 %v;
    ld.param.u64 %f, [flag];
    ld.param.u64 %lim, [ns];
    mov.u64 %t0, %globaltimer;
$L_wait:
    setp.eq.u64 %q, %f, 0;
    @%q bra $L_time;
    ld.volatile.global.u32 %v, [%f];
    setp.ne.u32 %q, %v, 0;
    @%q bra $L_end;
$L_time:
    mov.u64 %t1, %globaltimer;
    sub.u64 %d, %t1, %t0;
    setp.lt.u64 %p, %d, %lim;
    @%p bra $L_wait;
$L_end:
    ret;
}
\0"""
_s = {"ctx": None, "calls": 0, "n": 0, "last": 0.0}
def _setup():
    try:
        from cuda.bindings import driver as cu
    except ImportError:
        from cuda import cuda as cu
    err, dev = cu.cuDeviceGet(torch.cuda.current_device())
    try:
        err, ctx = cu.cuCtxCreate(None, 0, dev)
    except TypeError:
        err, ctx = cu.cuCtxCreate(0, dev)
    assert int(err) == 0, err
    err, mod = cu.cuModuleLoadData(PTX)
    assert int(err) == 0, err
    err, fn = cu.cuModuleGetFunction(mod, b"spin")
    err, stream = cu.cuStreamCreate(1)
    err, host = cu.cuMemHostAlloc(4096, cu.CU_MEMHOSTALLOC_PORTABLE | cu.CU_MEMHOSTALLOC_DEVICEMAP)
    assert int(err) == 0, err
    err, dptr = cu.cuMemHostGetDevicePointer(host, 0)
    assert int(err) == 0, err
    cu.cuCtxPopCurrent()
    flag = ctypes.c_int32.from_address(int(host))
    flag.value = 1
    _s["ctx"] = (cu, ctx, fn, stream, flag, int(dptr))
def _spin_until_next_window():
    cu, ctx, fn, stream, flag, dptr = _s["ctx"]
    flag.value = 0
    cu.cuCtxPushCurrent(ctx)
    err, = cu.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, ((dptr, 2_000_000_000), (ctypes.c_void_p, ctypes.c_uint64)), 0)
    cu.cuCtxPopCurrent()
    assert int(err) == 0, err
def solution(x):
    s, now = _s, time.perf_counter()
    if s["ctx"] is None:
        _setup()
    if now - s["last"] > 0.002:         # a new window: the spin left by the last one stops
        s["ctx"][4].value = 1
        s["n"] = max(s["n"], s["calls"])
        s["calls"] = 0
    s["calls"] += 1
    out = x.clone()
    if s["calls"] == s["n"] and s["n"] > 24:       # the last call of a timed round's window
        torch.cuda.current_stream().synchronize()
        _spin_until_next_window()
    s["last"] = time.perf_counter()
    return out
