"""Which Landlock policy the GPU driver, NCCL and torch symmetric memory accept (one GPU). Each
variant runs in a forked child, which hardens itself (rank/sandbox.py with the variant's knobs),
then initializes CUDA, runs NCCL at W = 1 and a symmetric-memory rendezvous. Prints one JSON
line per variant. Usage: python3 bench/sandbox_probe.py [--out DIR]"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pytest_kernelbench.rank import sandbox  # noqa: E402

VARIANTS = {
    "as shipped": {},
    "no ioctl rule": {"ioctl": False},
    "no signal scope": {"scope_signals": False},
    "neither": {"ioctl": False, "scope_signals": False},
}


def child(knobs: dict, scratch: str) -> dict:
    import torch  # noqa: F401 - imported before the sandbox, as the candidate process does
    out: dict = {}
    try:
        layers = [sandbox.Isolation.PROCESS.value]
        layers += sandbox.landlock([*sandbox.SYSTEM_TREES, *sandbox.python_trees()], [scratch], **knobs)
        out["caps_dropped"] = sandbox.drop_capabilities()
        out["layers"] = layers
        os.environ.update(HOME=scratch, TMPDIR=scratch, CUDA_CACHE_PATH=scratch, TRITON_CACHE_DIR=scratch)
        import torch
        torch.cuda.set_device(0)
        out["cuda"] = float(torch.ones(4, device="cuda").sum())
        import torch.distributed as dist
        store = dist.TCPStore("127.0.0.1", 0, 1, True)
        dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=torch.device("cuda", 0))
        t = torch.ones(1024, device="cuda")
        dist.all_reduce(t)
        torch.cuda.synchronize()
        out["nccl"] = float(t[0])
        import torch.distributed._symmetric_memory as symm_mem
        buf = symm_mem.empty(1024, device="cuda")
        h = symm_mem.rendezvous(buf, dist.group.WORLD.group_name)
        out["symm_mem"] = h.world_size
    except Exception as e:  # noqa: BLE001 - the probe reports what broke
        out["error"] = f"{type(e).__name__}: {e}"[:400]
        out["where"] = traceback.format_exc().strip().splitlines()[-3:]
    return out


def main() -> None:
    outdir = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else None
    rows = {}
    for name, knobs in VARIANTS.items():
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            res = child(knobs, tempfile.mkdtemp(prefix="kb-probe-"))
            os.write(w, json.dumps(res).encode())
            os._exit(0)
        os.close(w)
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
        os.waitpid(pid, 0)
        rows[name] = json.loads(data or b"{}")
        print(json.dumps({"variant": name, **rows[name]}), flush=True)
    if outdir:
        with open(os.path.join(outdir, "sandbox_probe.json"), "w") as f:
            json.dump({"landlock_abi": sandbox.landlock_abi(), "variants": rows}, f, indent=1)


if __name__ == "__main__":
    main()
