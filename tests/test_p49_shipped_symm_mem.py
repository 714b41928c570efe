"""Issue 49: the shipped symmetric-memory solutions of collective/all_gather_v_reduce_scatter_v and
p2p/kv_transfer_disagg, checked where no GPU is: their CUDA kernel compiles for sm_90 (nvcc), and
their Python layer (staging layout, peers' offsets, the parity of the double buffer, the block
tables) gives the task's results in an emulation of W ranks as W threads of one process: symmetric
buffers are CPU tensors every rank sees, the handle's barrier and dist.barrier are a thread barrier,
and the all-gather-v kernel is the task text's formula reading the same device addresses. On a GPU
they run as candidates (bench/gpu_shared.sh, --kb-candidate=shipped)."""
from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parent.parent
AGV, KV = "collective/all_gather_v_reduce_scatter_v", "p2p/kv_transfer_disagg"
_POOL_OFFSET = 512                 # bytes before a symmetric tensor in its block


def _path(pid: str, name: str) -> Path:
    return ROOT / "problems" / pid / name


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Ranks:
    """W ranks as threads: symmetric allocation i of every rank, barriers, each thread's rank."""

    def __init__(self, world: int):
        self.world, self.local, self.lock = world, threading.local(), threading.Lock()
        self.bufs, self.made = {r: [] for r in range(world)}, {}
        self.sync = threading.Barrier(world, timeout=60)

    @property
    def rank(self) -> int:
        return self.local.rank

    def empty(self, *size, dtype, device):
        # like torch's pool, the tensor sits at an offset inside the block that buffer_ptrs names
        with self.lock:
            i = self.made.get(self.rank, 0)
            self.made[self.rank] = i + 1
            if len(self.bufs[self.rank]) <= i:
                numel = torch.Size(size).numel()
                for r in range(self.world):   # garbage, as fresh device memory holds
                    block = torch.full((_POOL_OFFSET + numel * torch.tensor([], dtype=dtype).element_size(),), 7,
                                       dtype=torch.uint8)
                    self.bufs[r].append((block, block[_POOL_OFFSET:].view(dtype).view(size)))
            return self.bufs[self.rank][i][1]

    def rendezvous(self, t, group_name):
        self.sync.wait()                      # collective: every rank has allocated
        i = next(i for i, (_, view) in enumerate(self.bufs[self.rank]) if view is t)
        ranks = self

        class Handle:
            world_size, rank = ranks.world, ranks.rank
            buffer_ptrs = [ranks.bufs[r][i][0].data_ptr() for r in range(ranks.world)]

            def get_buffer(self, r, shape, dtype, storage_offset=0):     # from the block's start
                b = ranks.bufs[r][i][0].view(dtype)
                return b[storage_offset:storage_offset + torch.Size(shape).numel()].view(shape)

            def barrier(self, channel=0):
                ranks.sync.wait()

        return Handle()

    def at(self, ptr: int, dtype, shape):
        """The tensor of `shape` at device address `ptr` in some rank's symmetric buffer."""
        nbytes = torch.Size(shape).numel() * torch.tensor([], dtype=dtype).element_size()
        for lst in self.bufs.values():
            for b, _ in lst:
                base = b.data_ptr()
                if base <= ptr and ptr + nbytes <= base + b.numel():
                    return b[ptr - base:ptr - base + nbytes].view(dtype).view(shape)
        raise AssertionError(f"address {ptr:#x} is in no symmetric buffer")

    def call(self, mods, ins) -> list:
        """solution() on every rank at once; the results in rank order."""
        outs, errors = [None] * self.world, []

        def one(r):
            self.local.rank = r
            try:
                outs[r] = mods[r].solution(*ins[r])
            except BaseException as e:   # noqa: BLE001 - re-raised in the test's thread
                errors.append(e)
                self.sync.abort()

        threads = [threading.Thread(target=one, args=(r,)) for r in range(self.world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return outs


@pytest.fixture
def ranks(monkeypatch):
    def make(world: int) -> _Ranks:
        w = _Ranks(world)
        fake = types.ModuleType("torch.distributed._symmetric_memory")
        fake.empty, fake.rendezvous = w.empty, w.rendezvous
        monkeypatch.setitem(sys.modules, "torch.distributed._symmetric_memory", fake)
        # `import torch.distributed._symmetric_memory as m` reads the package's attribute first: once
        # another test imported the real module (a CI worker's earlier tests), sys.modules alone is not seen
        monkeypatch.setattr(dist, "_symmetric_memory", fake, raising=False)
        monkeypatch.setattr(dist, "get_rank", lambda: w.rank)
        monkeypatch.setattr(dist, "get_world_size", lambda: world)
        monkeypatch.setattr(dist, "barrier", lambda *a, **k: w.sync.wait())
        monkeypatch.setattr(dist, "group", types.SimpleNamespace(WORLD=types.SimpleNamespace(group_name="0")))
        monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: types.SimpleNamespace(multi_processor_count=4))
        return w
    return make


def _inputs(pid, size, world, call):
    harness = _load(_path(pid, "harness.py"), "harness_" + pid.replace("/", "_"))
    return [harness.inputs(size, r, world, torch.Generator().manual_seed(10 * call + r), torch.device("cpu"),
                           torch.bfloat16) for r in range(world)]


@pytest.mark.parametrize("world", [2, 4])
def test_all_gather_v_staging_and_addresses_give_the_task_result(ranks, world):
    w = ranks(world)

    def kernel(gathered, reduced, xp, yp, cp, rank, world_, grid):   # what the CUDA kernel computes
        cap, h = reduced.shape
        cnt = [int(w.at(p, torch.int64, (1,))) for p in cp]
        start = [sum(cnt[:q]) for q in range(world_)]
        gathered.zero_()
        reduced.zero_()
        for q in range(world_):
            gathered[start[q]:start[q] + cnt[q]] = w.at(xp[q], torch.bfloat16, (cap, h))[:cnt[q]]
        mine = slice(start[rank], start[rank] + cnt[rank])
        reduced[:cnt[rank]] = sum(w.at(yp[q], torch.bfloat16, (world_ * cap, h))[mine].float()
                                  for q in range(world_)).to(torch.bfloat16)

    mods = [_load(_path(AGV, "solutions/symm_mem_pull.py"), f"agv_{r}") for r in range(world)]
    for mod in mods:
        mod._ext = types.SimpleNamespace(run=kernel)
    size = {"cap": 8, "hidden": 64}
    for call in range(3):                      # both halves of the double buffer, then the first again
        ins = _inputs(AGV, size, world, call)
        outs = w.call(mods, ins)
        cnt = [int(i[2]) for i in ins]
        start = [sum(cnt[:q]) for q in range(world)]
        for r, (gathered, reduced) in enumerate(outs):
            want_g = torch.zeros_like(ins[r][1])
            want_r = torch.zeros(size["cap"], size["hidden"])
            for q in range(world):
                want_g[start[q]:start[q] + cnt[q]] = ins[q][0][:cnt[q]]
                want_r[:cnt[r]] += ins[q][1][start[r]:start[r] + cnt[r]].float()
            assert torch.equal(gathered, want_g), (call, r)
            assert torch.equal(reduced, want_r.to(torch.bfloat16)), (call, r)


@pytest.mark.parametrize("world", [2, 4])
def test_kv_transfer_lands_every_block_and_flag(ranks, world):
    w = ranks(world)
    mods = [_load(_path(KV, "solutions/symm_mem_pull.py"), f"kv_{r}") for r in range(world)]
    size = {"layers": 2, "num_blocks": 8, "block_size": 4, "kv_heads": 2, "head_dim": 8, "blocks": 3}
    for call in range(3):
        ins = _inputs(KV, size, world, call)
        before = [tuple(t.clone() for t in i) for i in ins]
        assert w.call(mods, ins) == [None] * world
        for d in range(1, world, 2):
            p = d - 1
            want = before[d][0].clone()
            want[:, :, before[d][1]] = before[p][0][:, :, before[p][1]]
            assert torch.equal(ins[d][0], want), (call, d)
            assert torch.equal(ins[d][2], before[d][3].expand(size["layers"])), (call, d)
            assert all(torch.equal(a, b) for a, b in zip(ins[p], before[p])), "a prefill input changed"
            assert torch.equal(ins[d][1], before[d][1]) and torch.equal(ins[d][3], before[d][3])


def _cuda_source(pid: str) -> str:
    text = _path(pid, "solutions/symm_mem_pull.py").read_text()
    return re.search(r"_CUDA_SRC = r'''(.*?)'''", text, re.S).group(1)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.e2e
def test_the_all_gather_v_kernel_compiles_for_sm90(tmp_path):
    src = tmp_path / "agv.cu"
    src.write_text(_cuda_source(AGV))
    proc = subprocess.run(["nvcc", "-O3", "-gencode=arch=compute_90,code=sm_90", "-c", str(src),
                           "-o", str(tmp_path / "agv.o")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_both_are_listed_for_cuda_only_and_never_touch_multicast():
    import yaml

    from pytest_kernelbench.candidates.safety import scan
    for pid in (AGV, KV):
        data = yaml.safe_load(_path(pid, "problem.yaml").read_text())
        assert data["solutions"] == {"symm_mem_pull": {"devices": ["cuda"]}}, pid
        assert scan(_path(pid, "solutions/symm_mem_pull.py").read_text()) is None, pid
