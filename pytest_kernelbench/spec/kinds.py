"""Problem kinds as strategies: what differs between a rewrite problem (the candidate is a Python
module whose solution() replaces reference.py's) and a native one (the C++/CUDA edit regions of a
template, built before launch; problems/NATIVE.md). Every stage asks the problem's Kind instead of
testing its name: the spec loader for the kind's own problem.yaml fields, the candidate stage for
the answer's language and file, the prompt for its words, the session for what happens before
launch. ParallelKernelBench's problems are rewrite problems from another source (pkb/checkout.py).

Adding a kind: a Kind row here, its loader in spec/problem.py's LOADERS, its task text in
candidates/prompt.py's TASKS, and (when `built`) its preparation in native/-like code the session
calls before launch."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

@dataclass(frozen=True)
class Kind:
    name: str
    language: str                 # what a candidate is written in: "python", or "c" (C/C++/CUDA regions)
    fields: tuple[str, ...]       # problem.yaml fields only this kind takes
    built: bool                   # built before launch: the job ships the library and the hidden glue
    system_prompt: str            # templates/*.md: the first message of a model's chat
    refine_prompt: str            # templates/*.md: what a later round is asked
    states_inplace: bool          # the task text states the in-place rule (a template's entry point says its own)
    copies_detectable: bool       # a returned reference is recognisable (a native answer is C, the reference Python)
    transports: str | None        # what a CPU candidate may communicate with, when the kind fixes it
    setup_examples: str | None    # per-size setup the prompt names (None: by device)
    loading: str | None           # what the first call's budget covers besides setup (None: by device)

    def suffix(self, template: str | None) -> str:
        """A candidate file's suffix: a module, or the template's own language."""
        return Path(template).suffix if self.language == "c" and template else ".py"


REWRITE = Kind(
    name="rewrite", language="python", fields=(), built=False,
    system_prompt="system.md", refine_prompt="refine.md", states_inplace=True, copies_detectable=True,
    transports=None, setup_examples=None, loading=None)

NATIVE = Kind(
    name="native", language="c", fields=("template", "build"), built=True,
    system_prompt="system_native.md", refine_prompt="refine_native.md", states_inplace=False,
    copies_detectable=False,
    transports="what the template's fixed part provides (for example memory shared by the rank processes)",
    setup_examples="work done once per size, e.g. scratch buffers or tables", loading="Loading your library")

KINDS: dict[str, Kind] = {k.name: k for k in (REWRITE, NATIVE)}
