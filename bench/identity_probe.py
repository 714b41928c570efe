"""Does a process hardened exactly like the candidate process (rank/sandbox.py harden() with the
job's identity, issue 44: a uid of its own, a mount namespace, only the device nodes it needs) still
run what candidates run on a GPU machine? One line per step, ok or error, in a forked child that
hardens itself as rank/solverboot.py main() does; the parent plays the checker (root, unhardened,
CUDA initialized after the fork) for the CUDA IPC steps both ways. Steps: the system files it must
not open for writing (opened and closed, never written), CUDA, IPC of a checker's allocation and of
its own, NCCL at W = 1 and one all_reduce, symmetric memory empty + rendezvous at W = 1, a tiny
load_inline CUDA extension, a tiny Triton kernel. Where a step fails, the variant is run again with
the trusted side's fallbacks (KB_SANDBOX_FULL_TREES=1, then KB_SANDBOX_KEEP_UID=1 as well) to say
which one it needs. Also lists the device nodes and their modes. What is absent is skipped.
Usage: PYTHONPATH=$PWD python3 bench/identity_probe.py   (under ~2 minutes; the build is the bulk)"""
from __future__ import annotations

import glob
import os
import shutil
import socket
import stat
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pytest_kernelbench.rank import identity, sandbox  # noqa: E402

CHILD_LIMIT_S = 150
MUST_REFUSE = ["/proc/sys/kernel/core_pattern", "/dev/cpu_dma_latency", "/dev/kmsg", "/proc/1/autogroup",
               *sorted(glob.glob("/sys/devices/system/cpu/cpu[1-9]*/online"))[:1]]
CUDA_SRC = r"""
__global__ void add_one(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1.f; }
void launch(torch::Tensor x) { add_one<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), x.numel()); }
"""


def nodes() -> list[str]:
    out = []
    for pattern in ("/dev/nvidia*", "/dev/nvidia-caps/*", "/dev/nvidia-caps-imex-channels/*", "/dev/dri/*",
                    "/dev/shm", "/dev/infiniband/*", "/dev/cpu_dma_latency", "/dev/kmsg"):
        for p in sorted(glob.glob(pattern)):
            try:
                st = os.stat(p)
                out.append(f"{p} {stat.filemode(st.st_mode)} {st.st_uid}:{st.st_gid}")
            except OSError as e:
                out.append(f"{p} ({e.strerror})")
    return out


def step(name: str, fn) -> None:
    t = time.monotonic()
    try:
        r = fn()
        print(f"  {name}: ok {r if r is not None else ''} ({time.monotonic() - t:.1f} s)", flush=True)
    except Exception as e:  # noqa: BLE001 - the probe says what broke
        where = traceback.format_exc().strip().splitlines()[-3:-1]
        print(f"  {name}: error {type(e).__name__}: {str(e)[:300]} | {' / '.join(w.strip() for w in where)[:300]}",
              flush=True)
        FAILED.append(name)


FAILED: list[str] = []


def opens_for_writing(path: str) -> str:
    try:
        os.close(os.open(path, os.O_WRONLY))     # opened and closed: nothing is written
    except OSError as e:
        return f"refused ({e.strerror})"
    raise RuntimeError("OPENS FOR WRITING")


def child(sock: socket.socket, scratch: str, builds: str, ident: identity.Identity, parent: int) -> None:
    import torch  # noqa: F401 - imported before the sandbox, as the candidate process has it
    import torch.distributed  # noqa: F401
    os.environ.update(HOME=scratch, TMPDIR=scratch, XDG_CACHE_HOME=scratch, CUDA_CACHE_PATH=scratch,
                      TORCH_EXTENSIONS_DIR=builds, TRITON_CACHE_DIR=os.path.join(builds, "triton"),
                      **identity.env(ident))
    tempfile.tempdir = None      # the parent's mkdtemp cached /tmp, which the sandbox closes (solverboot.main does the same)
    layers = sandbox.harden([], [scratch, builds], ident)
    os.chdir(scratch)
    if "uid" in layers:
        identity.dumpable(True)
    print(f"  layers: {layers}; uid {os.getresuid()} gid {os.getresgid()} groups {os.getgroups()}", flush=True)
    for p in [*MUST_REFUSE, f"/proc/{parent}/autogroup"]:
        step(f"refuses {p}", lambda p=p: opens_for_writing(p))
    for p in sorted(glob.glob("/dev/nvidia*")):
        if not os.path.isdir(p):
            step(f"opens {p} read-write", lambda p=p: os.close(os.open(p, os.O_RDWR)))
    import torch
    if not torch.cuda.is_available():
        print("  cuda: absent here, the GPU steps are skipped", flush=True)
        return
    step("cuda init", lambda: float(torch.ones(4, device="cuda").sum()))
    from pytest_kernelbench.rank.cuda import Driver
    drv = Driver()

    def theirs() -> str:           # the checker's allocation, opened here (the arenas it lends)
        handle = bytes.fromhex(sock.recv(4096).decode())
        p = drv.ipc_open(handle)
        drv.ipc_close(p)
        return hex(p)

    def mine() -> str:             # an allocation of ours, opened by the checker (outputs it reads)
        t = torch.ones(1 << 20, device="cuda")
        base, _ = drv.allocation(t.data_ptr())
        sock.sendall(drv.ipc_handle(base).hex().encode())
        answer = sock.recv(4096).decode()
        if not answer.startswith("ok"):
            raise RuntimeError(answer)
        return answer
    step("ipc: opens the checker's allocation", theirs)
    step("ipc: the checker opens ours", mine)
    import torch.distributed as dist

    def nccl() -> float:
        store = dist.TCPStore("127.0.0.1", 0, 1, True)
        dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=torch.device("cuda", 0))
        t = torch.ones(1024, device="cuda")
        dist.all_reduce(t)
        torch.cuda.synchronize()
        return float(t[0])
    step("nccl W=1 all_reduce", nccl)

    def symm() -> int:
        import torch.distributed._symmetric_memory as symm_mem
        buf = symm_mem.empty(1024, device="cuda")
        return symm_mem.rendezvous(buf, dist.group.WORLD.group_name).world_size
    if dist.is_initialized():
        step("symm_mem empty+rendezvous", symm)

    def extension() -> float:
        from torch.utils.cpp_extension import load_inline
        mod = load_inline("kb_identity_probe", cpp_sources="void launch(torch::Tensor x);", cuda_sources=CUDA_SRC,
                          functions=["launch"])
        x = torch.zeros(1000, device="cuda")
        mod.launch(x)
        return float(x.sum())
    step("load_inline", extension)

    def triton_kernel() -> float:
        import triton
        import triton.language as tl

        @triton.jit
        def add_one(x_ptr, n, BLOCK: tl.constexpr):
            i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)
        x = torch.zeros(1000, device="cuda")
        add_one[(4,)](x, 1000, BLOCK=256)
        return float(x.sum())
    step("triton", triton_kernel)
    if dist.is_initialized():
        dist.destroy_process_group()


def checker_side(sock: socket.socket) -> None:
    """The parent, as the checker: CUDA after the fork, an allocation lent, the child's opened."""
    import torch
    from pytest_kernelbench.rank.cuda import CudaError, Driver
    sock.settimeout(CHILD_LIMIT_S)
    try:
        torch.zeros(1, device="cuda")
        drv = Driver()
        t = torch.ones(1 << 20, device="cuda")
        base, _ = drv.allocation(t.data_ptr())
        sock.sendall(drv.ipc_handle(base).hex().encode())
        handle = sock.recv(4096)
        try:
            p = drv.ipc_open(bytes.fromhex(handle.decode()))
            drv.ipc_close(p)
            sock.sendall(b"ok")
        except CudaError as e:
            sock.sendall(f"the checker could not open it: {e}".encode())
    except (OSError, ValueError, CudaError):
        pass


def variant() -> int:
    """One variant, in a process of its own (the fork must come before CUDA is initialized here)."""
    scratch, builds = tempfile.mkdtemp(prefix="kb-id-"), os.path.join(os.environ["KB_PROBE_BUILDS"], "ext")
    os.makedirs(os.path.join(builds, "triton"), exist_ok=True)
    mine, _ = identity.job_identities(scratch)
    identity.give([scratch, builds], mine if identity.wanted() else identity.Identity(os.geteuid(), os.getegid(), ""))
    ours, theirs = socket.socketpair()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        ours.close()
        code = 0
        try:
            child(theirs, scratch, builds, mine, parent)
            code = 1 if FAILED else 0
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
            code = 2
        finally:
            sys.stdout.flush()
            os._exit(code)
    theirs.close()
    try:
        import torch
        if torch.cuda.is_available():       # after the fork, as the checker's own context
            checker_side(ours)
        end = time.monotonic() + CHILD_LIMIT_S
        while time.monotonic() < end:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.2)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        print(f"  timed out after {CHILD_LIMIT_S} s", flush=True)
        return 3
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_variant(name: str, env: dict[str, str], builds: str) -> bool:
    import subprocess
    print(f"== {name}", flush=True)
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--variant"],
                       env={**os.environ, **env, "KB_PROBE_BUILDS": builds}, timeout=CHILD_LIMIT_S + 60)
    return r.returncode == 0


def main() -> None:
    print(f"uid {os.geteuid()}, landlock ABI {sandbox.landlock_abi()}, expected layers {sandbox.expected_layers()}",
          flush=True)
    print("device nodes:", *nodes(), sep="\n  ", flush=True)
    builds = tempfile.mkdtemp(prefix="kb-id-builds-")       # shared by the variants: one build
    try:
        if not run_variant("as shipped", {}, builds) and identity.wanted():
            full = {sandbox.FULL_TREES_ENV: "1"}
            if not run_variant(f"{sandbox.FULL_TREES_ENV}=1", full, builds):
                run_variant(f"{identity.KEEP_UID_ENV}=1 as well", {**full, identity.KEEP_UID_ENV: "1"}, builds)
    finally:
        shutil.rmtree(builds, ignore_errors=True)


if __name__ == "__main__":
    if "--variant" in sys.argv:
        sys.exit(variant())
    main()
