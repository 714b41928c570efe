"""The built-in launchers by name (--kb-launcher): a module launch/<name>.py that names its class
`LAUNCHER` at module level is the launcher `<name>`. Adding one is that one new file; nothing here
changes. A launcher from outside the package answers the `pytest_kb_make_launcher` hook instead
(hookspec.py); plugin.py asks the hook first."""
from __future__ import annotations

import ast
import importlib
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from .base import Launcher

if TYPE_CHECKING:
    from ..options import Settings

HERE = Path(__file__).resolve().parent
DEFAULT = "fork"


@cache
def builtin() -> tuple[str, ...]:
    """The built-in launchers' names, the default first: found by reading launch/*.py (nothing is
    imported, so torchrun's module stays unloaded under fork and a Slurm launcher's off a cluster)."""
    names = []
    for path in sorted(HERE.glob("*.py")):
        tree = ast.parse(path.read_text())
        if any(isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "LAUNCHER"
                                                    for t in node.targets) for node in tree.body):
            names.append(path.stem)
    return tuple(sorted(names, key=lambda n: (n != DEFAULT, n)))


def make(name: str, settings: Settings | None = None) -> Launcher | None:
    """A new built-in launcher (its class called with the run's settings, None in tests), or None
    for a name that is not one."""
    if name not in builtin():
        return None
    launcher: Launcher = importlib.import_module(f"{__package__}.{name}").LAUNCHER(settings)
    return launcher


def known() -> str:
    """The built-in names as a usage error lists them: "fork, slurm or torchrun"."""
    names = builtin()
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
