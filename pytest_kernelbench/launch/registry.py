"""The built-in launchers by name (--kb-launcher). Adding one: a file launch/<name>.py with a class
satisfying base.Launcher, and its one line here. A launcher from outside the package answers the
`pytest_kb_make_launcher` hook instead (hookspec.py); plugin.py asks the hook first."""
from __future__ import annotations

import importlib

from .base import Launcher

# name -> "module:class" under launch/, imported only when chosen (torchrun's module stays unloaded
# under fork, a Slurm launcher's off a cluster)
BUILTIN = {
    "fork": "fork:ForkLauncher",
    "torchrun": "torchrun:TorchrunLauncher",
}


def make(name: str) -> Launcher | None:
    """A new built-in launcher (its class called without arguments), or None for a name that is
    not one."""
    where = BUILTIN.get(name)
    if where is None:
        return None
    module, cls = where.split(":")
    launcher: Launcher = getattr(importlib.import_module(f"{__package__}.{module}"), cls)()
    return launcher


def known() -> str:
    """The built-in names as a usage error lists them: "fork or torchrun"."""
    names = sorted(BUILTIN)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
