"""The text a model sees: the task, the reference, the exact contract, the hardware as it is, the
output format; and, for refinement rounds, what went wrong last time (feedback.py); the sections themselves are sections.py.

The hidden harness never appears: input shapes come from problem.yaml's sizes and a structural
probe (pytest_kernelbench.spec.shapes, run in another process), and failure excerpts drop any line
of harness.py. The words live in templates/*.md; this module only fills them in. Every rule the
harness enforces on an honest answer is stated here (calls, streams, global torch state, the
comparison, forbidden families, the multicast rule), and the multicast rule in words that the
multicast scan (candidates/safety.py) does not itself refuse.
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING

from ..native.prompt import native_task_text
from ..spec.kinds import REWRITE
from ..protocol import Failure
from .feedback import HIDDEN_LINE, body, goal, harness_lines, needs_refinement, redact
from .sections import (  # noqa: F401 (callers')
    PRIMITIVES_EXAMPLE,
    calls_text,
    correctness_text,
    fill,
    forbid_text,
    hardware_text,
    has_own_check,
    inputs_text,
    lang_of,
    primitives_text,
    signature,
    topology_text,
)

if TYPE_CHECKING:
    from ..spec.problem import Placement, Problem

__all__ = ["HIDDEN_LINE", "harness_lines", "needs_refinement", "redact", "messages", "refine_messages", "feedback",
           "task_text", "hardware_text", "render", "digest"]


def task_text(problem: Problem, placement: Placement, machine: dict, probed: dict | None,
              compile_budget_s: float | None = None, deadline_s: float | None = None) -> str:
    cuda = placement.device == "cuda"
    return fill(
        "task.md", title=problem.title, problem_id=problem.id, description=problem.description.strip(),
        reference=problem.reference_path.read_text().strip(), signature=signature(problem),
        # a shared placement (--kb-oversubscribe): ranks share GPUs and the group is gloo (NCCL refuses them)
        ranks_text=("ranks sharing GPUs (a correctness check; nothing is timed)" if placement.shared else
                    "one GPU per rank" if cuda else "one CPU process per rank"),
        backend="nccl" if cuda and not placement.shared else "gloo",
        world_size=placement.world_size, world_sizes=", ".join(map(str, problem.world_sizes)),
        dtype=problem.dtype, inputs=inputs_text(problem, placement, probed),
        calls_text=calls_text(problem, placement, compile_budget_s, deadline_s),
        returning_text=fill("returning_cuda.md" if cuda else "returning_cpu.md"),
        correctness_text=correctness_text(problem), forbid_text=forbid_text(problem),
        hardware=hardware_text(machine, placement, problem), primitives=primitives_text(placement))


def messages(problem: Problem, placement: Placement, machine: dict, probed: dict | None,
             compile_budget_s: float | None = None, deadline_s: float | None = None) -> list[dict]:
    """The first round's chat: a system message and the task. compile_budget_s / deadline_s: the
    run's --kb-compile-timeout and the item's deadline (default: the protocol's and problem.yaml's)."""
    task = TASKS[problem.kind]
    return [{"role": "system", "content": fill(problem.kind_spec.system_prompt)},
            {"role": "user", "content": task(problem, placement, machine, probed, compile_budget_s, deadline_s)}]


# each kind's task text (spec/kinds.py); the system and refine prompts are the kind's own
TASKS = {"rewrite": task_text, "native": native_task_text}


# ---- refinement rounds -----------------------------------------------------------------------------
def refine_messages(first: list[dict], history: list[tuple[str, dict]], harness_text: str = "",
                    device: str = "cuda", native: Problem | None = None, rounds: int | None = None) -> list[dict]:
    """Round r's chat: the first round's, then for every earlier round the code it produced (as the
    assistant's turn) and what happened to it. history: [(code or answer text, record), ...];
    rounds: how many rounds the run allows (said in every feedback)."""
    out = list(first)
    for i, (code, record) in enumerate(history, start=1):
        if record.get("failure") == Failure.NO_CODE:     # the answer itself (clipped): there was no code
            content = (code or "").strip() or "(an empty answer)"
        else:
            content = f"```{lang_of(native)}\n{(code or '').strip()}\n```"
        out.append({"role": "assistant", "content": content})
        out.append({"role": "user", "content": feedback(record, i, harness_text, device, native, rounds)})
    return out


def feedback(record: dict, round_no: int, harness_text: str = "", device: str = "cuda",
             native: Problem | None = None, rounds: int | None = None) -> str:
    head, evidence = body(record, harness_text)
    of = f" of {rounds}" if rounds else ""
    left = ""
    if rounds:
        remaining = rounds - round_no - 1
        left = (" This next answer is the last round." if remaining <= 0 else
                f" After this next answer, {remaining} more round{'s remain' if remaining > 1 else ' remains'}.")
    values = dict(round=round_no, of=of, next=round_no + 1, outcome=head, excerpt=evidence, goal=goal(record),
                  left=left)
    kind = native.kind_spec if native is not None else REWRITE
    text = fill(kind.refine_prompt, lang=lang_of(native), **values)
    return re.sub(r"\n{3,}", "\n\n", text)


def render(messages_: list[dict]) -> str:
    """A chat as one markdown document, for people (the files under reports/<run-id>/prompts/)."""
    return "\n\n".join(f"<!-- {m['role']} -->\n{m['content']}" for m in messages_) + "\n"


def digest(messages_: list[dict]) -> str:
    return hashlib.sha256(json.dumps(messages_, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
