"""What a call costs on each side of the checker/candidate split, on one GPU: the same reference
(clone + NCCL all_reduce at W = 1) timed per call in the parent and in a forked child, with its
input (a) a plain tensor, (b) a view of driver-allocated memory (as the checker's arenas are),
(c) that memory opened by IPC in the child (as the candidate sees it); and the child (d) hardened,
(e) watched by the environment watcher, (f) beside a parent that spins. Prints one JSON line per
case (microseconds per call, median of 5 windows of 200 calls). Usage: python3 bench/split_cost_probe.py"""
from __future__ import annotations

import json
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

N = 1 << 19      # 1 MiB of bf16


def group(store_port: int | None):
    import torch
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", 0, 1, True) if store_port is None else None
    dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=torch.device("cuda", 0))


def per_call(x) -> float:
    import torch
    import torch.distributed as dist

    def ref(t):
        out = t.clone()
        dist.all_reduce(out)
        return out
    for _ in range(50):
        ref(x)
    torch.cuda.synchronize()
    windows = []
    for _ in range(5):
        held = []
        t0 = time.perf_counter()
        for _ in range(200):
            held.append(ref(x))
        torch.cuda.synchronize()
        windows.append((time.perf_counter() - t0) / 200 * 1e6)
    return round(statistics.median(windows), 2)


def child(conn: socket.socket, handle: bytes, knobs: dict) -> None:
    import torch

    from pytest_kernelbench.rank import sandbox
    from pytest_kernelbench.rank.cuda import Driver, bytes_tensor
    if knobs.get("harden"):
        sandbox.harden([], [])
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")
    group(None)
    out = {"plain": per_call(torch.randn(N, device="cuda", dtype=torch.bfloat16))}
    d = Driver()
    p = d.ipc_open(handle)
    x = bytes_tensor(p, N * 2, torch.device("cuda", 0)).view(torch.bfloat16)
    out["ipc_view"] = per_call(x)
    conn.sendall(json.dumps(out).encode())
    conn.close()
    os._exit(0)


def main() -> None:
    import torch
    cases = {"child": {}, "child hardened": {"harden": True}, "child watched": {"watch": True},
             "child, parent spinning": {"spin": True}}
    kids = {}
    for name, knobs in cases.items():      # every child forked before the parent touches CUDA
        a, b = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            a.close()
            handle = b.recv(64)
            child(b, handle, knobs)
        b.close()
        kids[name] = (pid, a, knobs)
    from pytest_kernelbench.rank.cuda import Driver, bytes_tensor
    from pytest_kernelbench.rank.envwatch import EnvWatch
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")
    d = Driver()
    mem = d.alloc(N * 2)
    handle = d.ipc_handle(mem)
    group(None)
    x = bytes_tensor(mem, N * 2, torch.device("cuda", 0)).view(torch.bfloat16)
    x.normal_()
    torch.cuda.synchronize()
    results = {"parent plain": per_call(torch.randn(N, device="cuda", dtype=torch.bfloat16)),
               "parent driver view": per_call(x)}
    for name, (pid, a, knobs) in kids.items():   # one child at a time
        watch = EnvWatch(pid, 0.005) if knobs.get("watch") else None
        a.sendall(handle)
        a.setblocking(False)
        data, end = b"", time.monotonic() + 120
        while time.monotonic() < end:
            try:
                chunk = a.recv(65536)
            except BlockingIOError:
                if not knobs.get("spin"):
                    time.sleep(0.001)
                continue
            if not chunk:
                break
            data += chunk
        os.waitpid(pid, 0)
        if watch is not None:
            watch.stop()
        results[name] = json.loads(data or b"{}")
    for k, v in results.items():
        print(json.dumps({"case": k, "us_per_call": v}), flush=True)


if __name__ == "__main__":
    main()
