"""The sections of a prompt, each a function of the problem, its placement and the machine: the
contract (signature, calls, correctness, forbidden families), the hardware as it is, the inputs. The
words live in templates/*.md; these functions fill them in. Shared by the rewrite prompt (prompt.py)
and the native one (native/prompt.py).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING

from ..options import DEFAULT_TIMEOUT_S as DEFAULT_DEADLINE_S
from ..protocol import JobSpec
from ..spec import hardware, shapes

if TYPE_CHECKING:
    from ..spec.problem import Placement, Problem

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
PRIMITIVES_EXAMPLE = TEMPLATES / "primitives_example.py"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")   # nvidia-smi underlines the header of `topo -m`


def template(name: str) -> Template:
    return Template((TEMPLATES / name).read_text())


def fill(name: str, **values: object) -> str:
    return template(name).substitute(**{k: "" if v is None else str(v) for k, v in values.items()}).strip()


# ---- pieces of the contract -----------------------------------------------------------------------
def _solution_def(problem: Problem) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    for node in ast.parse(problem.reference_path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "solution":
            return node
    return None


def signature(problem: Problem) -> str:
    """`def solution(x: torch.Tensor) -> torch.Tensor` as written in reference.py."""
    node = _solution_def(problem)
    if node is None:
        return "def solution(*inputs): ..."
    ret = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
    return f"def solution({ast.unparse(node.args)}){ret}: ..."


def parameters(problem: Problem) -> tuple[list[str], str | None]:
    """(positional parameter names, *args name or None) of the reference's solution()."""
    node = _solution_def(problem)
    if node is None:
        return [], "inputs"
    a = node.args
    return [p.arg for p in (*a.posonlyargs, *a.args)], (a.vararg.arg if a.vararg else None)


def has_own_check(problem: Problem) -> bool:
    """Whether harness.py defines check(): its comparison replaces allclose (parsed, never run)."""
    from ..spec.problem import ProblemError, harness_functions
    try:
        return "check" in harness_functions(problem.harness_path)
    except (OSError, ProblemError):
        return False


def forbid_text(problem: Problem) -> str:
    """Enforced alike on every device: a forbidden call fails the item on CPU (gloo) too."""
    if not problem.forbid:
        return fill("forbid_none.md")
    families = "; ".join(fill(f"forbid_{f}.md") for f in problem.forbid)
    return fill("forbid_rules.md", families=families)


def cpu_transports(problem: Problem) -> str:
    """What a CPU (gloo) candidate of this problem may communicate with."""
    if problem.kind_spec.transports:
        return problem.kind_spec.transports
    allowed = [name for family, name in (("p2p", "point-to-point calls (send, recv, isend, irecv, batch_isend_irecv)"),
                                          ("collectives", "torch.distributed collectives"))
               if family not in problem.forbid]
    if not allowed:
        return "none: every gloo transport is forbidden for this problem"
    return " and ".join(allowed) + " over gloo"


def inplace_text(problem: Problem) -> str:
    if problem.inplace:
        return ("This problem is in place: solution() must mutate its input(s) as the task says; the "
                "mutated inputs are compared with the reference's mutated inputs too.")
    return ("Inputs must not be modified (they are compared with a pristine copy after the call), and "
            "outputs must be new tensors, never views of an input.")


def correctness_text(problem: Problem) -> str:
    tol = problem.tolerance
    name = "correctness_own.md" if has_own_check(problem) else "correctness_allclose.md"
    inplace = inplace_text(problem) if problem.kind_spec.states_inplace else ""
    return fill(name, atol=tol.get("atol"), rtol=tol.get("rtol"), inplace_text=inplace)


def _seconds(s: float) -> str:
    return f"{s / 60:g} min" if s >= 120 and s % 60 == 0 else f"{s:g} s"


def calls_text(problem: Problem, placement: Placement, compile_budget_s: float | None, deadline_s: float | None) -> str:
    kind = problem.kind_spec
    if kind.setup_examples and kind.loading:
        setup, loading = kind.setup_examples, kind.loading
    elif placement.device == "cuda":
        setup, loading = ("JIT builds, buffers, symmetric-memory rendezvous, exchanging handles",
                          "Importing your module")
    else:
        setup, loading = "allocating buffers, exchanging handles", "Importing your module"
    return fill("calls.md", setup_examples=setup, loading=loading,
                compile_budget=_seconds(compile_budget_s or JobSpec.compile_timeout_s),
                deadline=_seconds(deadline_s or problem.timeout_s or DEFAULT_DEADLINE_S))


# ---- the hardware as a kernel writer plans with it -----------------------------------------------
def _gb(x: float | None) -> str | None:
    return f"{x / 1e9:.0f} GB/s" if x else None


def _tf(x: float | None) -> str | None:
    return f"{x / 1e12:.0f} TFLOP/s" if x else None


def _both(published: str | None, measured: str | None, how: str = "") -> str:
    parts = [f"{published} published" if published else None, f"{measured} measured{how}" if measured else None]
    return ", ".join(p for p in parts if p) or "unknown"


def _kib(b: float) -> str:
    return f"{b / 2**20:g} MiB" if b >= 2**20 else f"{b / 2**10:g} KiB"


def device_text(model: str, probed: dict) -> str:
    pub = hardware.published_device_facts(model)
    facts = {**pub, **{k: v for k, v in (probed or {}).items() if v is not None}}
    parts = []
    if facts.get("compute_capability"):
        parts.append(f"compute capability {facts['compute_capability']} "
                     f"(sm_{facts['compute_capability'].replace('.', '')})")
    if facts.get("sm_count"):
        parts.append(f"{facts['sm_count']} SMs")
    if facts.get("l2_bytes"):
        parts.append(f"{_kib(facts['l2_bytes'])} L2")
    if facts.get("smem_per_sm"):
        per_block = f" (up to {_kib(facts['smem_per_block'])} per block)" if facts.get("smem_per_block") else ""
        parts.append(f"{_kib(facts['smem_per_sm'])} shared memory per SM{per_block}")
    if facts.get("regs_per_sm"):
        parts.append(f"{facts['regs_per_sm']} 32-bit registers per SM")
    if not parts:
        return "details unknown"
    source = "from the driver" if (probed or {}).get("source") == "driver" else facts.get("source", "")
    return ", ".join(parts) + (f" ({source.replace('published', 'published figures for')})" if source else "")


def tensor_text(model: str) -> str:
    flops = hardware.published_device_facts(model).get("tensor_flops") or {}
    if not flops:
        return "unknown"
    tf = [f"{k} {v / 1e12:g}" for k, v in flops.items() if k != "int8"]
    text = ", ".join(tf) + " TFLOP/s"
    if "int8" in flops:
        text += f", int8 {flops['int8'] / 1e12:g} TOPS"
    return text + " (published)"


def topology_text(topology: str | None) -> str:
    """The GPU-to-GPU part of `nvidia-smi topo -m`: one sentence when every pair is linked alike,
    else the matrix (NICs, CPU affinity and the legend dropped)."""
    rows = [[c.strip() for c in ln.split("\t")] for ln in ANSI.sub("", topology or "").splitlines()]
    gpu = re.compile(r"GPU\d+")
    header = next((r for r in rows if len(r) > 1 and any(gpu.fullmatch(c) for c in r)
                   and not (gpu.fullmatch(r[0]) and r[1] in ("X", ""))), None)
    if header is None:
        return "(not available)"
    cells = [c for c in header if c]                    # column names; a data row starts with its own
    cols = [i for i, c in enumerate(cells) if gpu.fullmatch(c)]
    matrix = [[r[0]] + [r[1 + i] if 1 + i < len(r) else "?" for i in cols]
              for r in rows if r is not header and r and gpu.fullmatch(r[0])]
    if not matrix:
        return "(not available)"
    names = [cells[i] for i in cols]
    links = {c for row in matrix for name, c in zip(names, row[1:]) if name != row[0]}
    if len(matrix) == 1:
        return "one GPU (no peer)."
    if len(links) == 1:
        kind = next(iter(links))
        nv = re.fullmatch(r"NV(\d+)", kind)
        what = f"{nv.group(1)} bonded NVLinks" if nv else f"`{kind}`"
        return f"every pair of the {len(matrix)} GPUs is directly connected by {what} (`{kind}` in `nvidia-smi topo -m`)."
    table = ["      " + "  ".join(f"{n:>5}" for n in names)] + \
            [f"{row[0]:<6}" + "  ".join(f"{c:>5}" for c in row[1:]) for row in matrix]
    legend = "NV# = # bonded NVLinks; PIX/PXB/PHB/NODE/SYS = PCIe paths, nearest to farthest"
    return "`nvidia-smi topo -m` (" + legend + "):\n\n```\n" + "\n".join(table) + "\n```"


def hardware_text(machine: dict, placement: Placement, problem: Problem) -> str:
    m = machine or {}
    if placement.device == "cuda" and m.get("gpu_count"):
        model = m.get("gpu_model") or ""
        pub, meas = hardware.published_ceilings(model), m.get("calibration") or {}
        c = m.get("ceilings") or {}
        lat = meas.get("latency_s") or (c.get("latency_s") if "latency_s measured" in str(c.get("source")) else None)
        mem = (m.get("gpus") or [{}])[0].get("memory_mib")
        software = [f"CUDA {m['cuda']}" if m.get("cuda") else None, f"nvcc {m['nvcc']}" if m.get("nvcc") else None,
                    f"PyTorch {m['torch']}" if m.get("torch") else None,
                    f"Triton {m['triton']}" if m.get("triton") else None, f"NCCL {m['nccl']}" if m.get("nccl") else None,
                    f"Python {m['python']}" if m.get("python") else None]
        return fill("hardware_cuda.md", gpu_count=m.get("gpu_count"), gpu_model=model,
                    gpu_memory=f"{mem / 1024:.0f} GiB" if mem else "unknown memory", driver=m.get("driver"),
                    world_size=placement.world_size, device=device_text(model, m.get("device") or {}),
                    tensor=tensor_text(model) + (f"; dense bf16 matmul measured at {_tf(meas['peak_flops'])}"
                                                 if meas.get("peak_flops") else ""),
                    links=topology_text(m.get("topology")),
                    link_bw=_both(_gb(pub.get("link_bw")), _gb(meas.get("link_bw")),
                                  " (an SM-driven kernel pulling from every peer at once)"),
                    hbm_bw=_both(_gb(pub.get("hbm_bw")), _gb(meas.get("hbm_bw"))),
                    latency=f"{lat * 1e6:.1f} us measured" if lat else "not measured on this machine",
                    software=", ".join(s for s in software if s))
    return fill("hardware_cpu.md", cpu=m.get("cpu") or "unknown CPU", cpu_count=m.get("cpu_count"),
                world_size=placement.world_size, torch=m.get("torch"), python=m.get("python"),
                transports=cpu_transports(problem))


def primitives_text(placement: Placement) -> str:
    """The tested primitives example, for GPU prompts of rewrite problems."""
    if placement.device != "cuda":
        return ""
    return "\n" + fill("primitives.md", example=PRIMITIVES_EXAMPLE.read_text().strip()) + "\n"


# ---- the prompt --------------------------------------------------------------------------------------
def inputs_text(problem: Problem, placement: Placement, probed: dict | None) -> str:
    names, varargs = parameters(problem)
    return shapes.describe(probed, problem, placement.world_size, placement.sizes, names=names, varargs=varargs)


def lang_of(native: Problem | None) -> str:
    """The code fence of a problem's candidates: python, or the native template's language."""
    if native is None:
        return "python"
    return "cuda" if str(native.template).endswith(".cu") else "cpp"
