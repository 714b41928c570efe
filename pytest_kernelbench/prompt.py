"""The text a model sees: the task, the reference, the exact contract, the hardware as it is, the
output format; and, for refinement rounds, what went wrong last time.

The hidden harness never appears: input shapes come from problem.yaml's sizes and a structural
probe (pytest_kernelbench.shapes, run in another process), and failure excerpts drop any line
of harness.py. The words live in templates/*.md; this module only fills them in.
"""
from __future__ import annotations

import ast
import hashlib
import json
import re
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING

from . import shapes

if TYPE_CHECKING:
    from .problem import Problem
    from .session import Placement

TEMPLATES = Path(__file__).parent / "templates"
EXCERPT_LINES = 30         # lines of a failure message shown to the model
EXCERPT_CHARS = 2500       # and characters
LOG_LINES = 25             # lines of the job's log tail (crash, runtime error, compile error, timeout)
HIDDEN_LINE = "[a line of the hidden test harness was removed]"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")   # nvidia-smi underlines the header of `topo -m`


def template(name: str) -> Template:
    return Template((TEMPLATES / name).read_text())


def fill(name: str, **values: object) -> str:
    return template(name).substitute(**{k: "" if v is None else str(v) for k, v in values.items()}).strip()


# ---- pieces of the contract -----------------------------------------------------------------------
def signature(problem: Problem) -> str:
    """`def solution(x: torch.Tensor) -> torch.Tensor` as written in reference.py."""
    tree = ast.parse(problem.reference_path.read_text())
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "solution":
            ret = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
            return f"def solution({ast.unparse(node.args)}){ret}: ..."
    return "def solution(*inputs): ..."


def forbid_text(problem: Problem) -> str:
    """Enforced alike on every device: a forbidden call fails the item on CPU (gloo) too."""
    if not problem.forbid:
        return fill("forbid_none.md")
    families = "; ".join(fill(f"forbid_{f}.md") for f in problem.forbid)
    return fill("forbid_rules.md", families=families)


def cpu_transports(problem: Problem) -> str:
    """What a CPU (gloo) candidate of this problem may communicate with."""
    if problem.kind == "native":
        return "what the template's fixed part provides (for example memory shared by the rank processes)"
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


def _gb(x: float | None) -> str:
    return f"{x / 1e9:.0f} GB/s" if x else "unknown"


def hardware_text(machine: dict, placement: Placement, problem: Problem) -> str:
    m = machine or {}
    if placement.device == "cuda" and m.get("gpu_count"):
        c = m.get("ceilings") or {}
        gpus = m.get("gpus") or [{}]
        mem = gpus[0].get("memory_mib")
        env = {k: v for k, v in (m.get("multicast") or {}).items() if v is not None}
        env_text = (" (" + ", ".join(f"{k}={v}" for k, v in sorted(env.items())) + ")") if env else ""
        return fill("hardware_cuda.md", gpu_count=m.get("gpu_count"), gpu_model=m.get("gpu_model"),
                    gpu_memory=f"{mem / 1024:.0f} GiB" if mem else "unknown memory", driver=m.get("driver"),
                    world_size=placement.world_size,
                    topology=ANSI.sub("", m.get("topology") or "(not available)").strip(),
                    link_bw=f"{_gb(c.get('link_bw'))} per direction",
                    ceilings_source="source: " + str(c.get("source", "none")),
                    hbm_bw=_gb(c.get("hbm_bw")),
                    peak_flops=f"{c['peak_flops'] / 1e12:.0f} TFLOP/s" if c.get("peak_flops") else "unknown",
                    multicast_env=env_text, cuda=m.get("cuda"), torch=m.get("torch"), nccl=m.get("nccl"),
                    python=m.get("python"))
    return fill("hardware_cpu.md", cpu=m.get("cpu") or "unknown CPU", cpu_count=m.get("cpu_count"),
                world_size=placement.world_size, torch=m.get("torch"), python=m.get("python"),
                platform=m.get("platform"), transports=cpu_transports(problem))


# ---- the prompt --------------------------------------------------------------------------------------
def task_text(problem: Problem, placement: Placement, machine: dict, probed: dict | None) -> str:
    tol = problem.tolerance
    return fill(
        "task.md", title=problem.title, problem_id=problem.id, description=problem.description.strip(),
        reference=problem.reference_path.read_text().strip(), signature=signature(problem),
        ranks_text="one GPU per rank" if placement.device == "cuda" else "one CPU process per rank",
        backend="nccl" if placement.device == "cuda" else "gloo",
        world_size=placement.world_size, world_sizes=", ".join(map(str, problem.world_sizes)),
        dtype=problem.dtype, inputs=shapes.describe(probed, problem, placement.world_size, placement.sizes),
        atol=tol.get("atol"), rtol=tol.get("rtol"), inplace_text=inplace_text(problem),
        forbid_text=forbid_text(problem), hardware=hardware_text(machine, placement, problem))


def messages(problem: Problem, placement: Placement, machine: dict, probed: dict | None) -> list[dict]:
    """The first round's chat: a system message and the task."""
    if problem.kind == "native":
        from .native.prompt import native_task_text
        return [{"role": "system", "content": fill("system_native.md")},
                {"role": "user", "content": native_task_text(problem, placement, machine, probed)}]
    return [{"role": "system", "content": fill("system.md")},
            {"role": "user", "content": task_text(problem, placement, machine, probed)}]


def refine_messages(first: list[dict], history: list[tuple[str, dict]], harness_text: str = "",
                    device: str = "cuda", native: Problem | None = None) -> list[dict]:
    """Round r's chat: the first round's, then for every earlier round the code it produced (as the
    assistant's turn) and what happened to it. history: [(code or answer text, record), ...]."""
    out = list(first)
    for i, (code, record) in enumerate(history, start=1):
        if record.get("failure") == "no_code":     # the answer itself (clipped): there was no code
            content = (code or "").strip() or "(an empty answer)"
        else:
            content = f"```{lang_of(native)}\n{(code or '').strip()}\n```"
        out.append({"role": "assistant", "content": content})
        out.append({"role": "user", "content": feedback(record, i, harness_text, device, native)})
    return out


def needs_refinement(record: dict, device: str) -> bool:
    """A round is refined when it failed, or passed slower than the reference on a GPU (CPU times
    are gloo, not speed, so a passing CPU round is final)."""
    if record.get("outcome") != "passed":
        return record.get("outcome") == "failed"
    score = record.get("score")
    return device == "cuda" and score is not None and score < 1.0


def lang_of(native: Problem | None) -> str:
    """The code fence of a problem's candidates: python, or the native template's language."""
    if native is None:
        return "python"
    return "cuda" if str(native.template).endswith(".cu") else "cpp"


def feedback(record: dict, round_no: int, harness_text: str = "", device: str = "cuda",
             native: Problem | None = None) -> str:
    outcome = record.get("outcome")
    failure = record.get("failure")
    if outcome == "passed":
        head = f"Correct at every size and trial, but {_speed_verdict(record)}."
        goal = "keep it correct and make it faster than the reference."
    else:
        head = f"Failed: {failure}."
        goal = "fix the failure (the module must be correct at every size, trial and rank)."
    parts = []
    msg = (record.get("message") or "").strip()
    if msg:
        parts.append("What the harness reported:\n```\n" + _clip(msg, EXCERPT_LINES, EXCERPT_CHARS) + "\n```")
    tail = record.get("log_tail")
    if tail and failure in ("crash", "runtime_error", "compile_error", "timeout"):
        lines = [ln for ln in tail.strip().splitlines() if ln.strip()][-LOG_LINES:]
        parts.append("Last lines of the job's log:\n```\n" + _clip("\n".join(lines), LOG_LINES, EXCERPT_CHARS) + "\n```")
    timing = _timing_lines(record)
    if timing:
        parts.append("Measured per size (median time per call, slowest rank):\n" + "\n".join(timing))
    warnings = record.get("warnings") or []
    if warnings:
        parts.append("Warnings:\n" + "\n".join(f"- {w}" for w in warnings[:8]))
    excerpt = redact("\n\n".join(parts), harness_text)
    if native is not None:
        return fill("refine_native.md", round=round_no, outcome=head, excerpt=excerpt, goal=goal, lang=lang_of(native))
    return fill("refine.md", round=round_no, outcome=head, excerpt=excerpt, goal=goal)


def _speed_verdict(record: dict) -> str:
    score = record.get("score")
    if score is None:
        return "its speed was not measured"
    return f"{score:.2f}x the reference's speed (geometric mean over sizes), slower than the reference"


def _timing_lines(record: dict) -> list[str]:
    lines = []
    for s in record.get("sizes") or []:
        t = s.get("timing") or {}
        ref, cand = (t.get("reference") or {}).get("median_s"), (t.get("candidate") or {}).get("median_s")
        if ref is None or cand is None:
            continue
        sp = s.get("speedup")
        roof = (s.get("roofline") or {}).get("candidate")
        extra = f", {roof:.0%} of the roofline" if roof else ""
        lines.append(f"- size {s.get('name')}: reference {_t(ref)}, yours {_t(cand)}, speedup "
                     f"{sp:.2f}x{extra}" if sp else f"- size {s.get('name')}: reference {_t(ref)}, yours {_t(cand)}")
    return lines


def _t(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.3f} ms"


def _clip(text: str, max_lines: int, max_chars: int) -> str:
    lines = text.splitlines()
    cut = len(lines) > max_lines
    text = "\n".join(lines[:max_lines])
    if len(text) > max_chars:
        text, cut = text[:max_chars], True
    return text + ("\n[... truncated]" if cut else "")


def harness_lines(harness_text: str, min_len: int = 12) -> set[str]:
    """The non-trivial lines of harness.py (stripped), which must never reach a model."""
    out = set()
    for ln in harness_text.splitlines():
        s = ln.strip()
        if len(s) < min_len or s.startswith(("import ", "from ", "#")) or s in ('"""', "'''"):
            continue
        out.add(s)
    return out


def redact(text: str, harness_text: str) -> str:
    """Drop every line that quotes harness.py (a traceback through it, say) and its file path."""
    if not harness_text:
        return text
    hidden = harness_lines(harness_text)
    out = []
    for ln in text.splitlines():
        s = ln.strip()
        if s and (s in hidden or any(h in ln for h in hidden if len(h) >= 25)):
            out.append(HIDDEN_LINE)
        else:
            out.append(re.sub(r'File "[^"]*harness\.py"', 'File "<hidden harness>"', ln))
    return "\n".join(out)


def render(messages_: list[dict]) -> str:
    """A chat as one markdown document, for people (the files under reports/<run-id>/prompts/)."""
    return "\n\n".join(f"<!-- {m['role']} -->\n{m['content']}" for m in messages_) + "\n"


def digest(messages_: list[dict]) -> str:
    return hashlib.sha256(json.dumps(messages_, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
