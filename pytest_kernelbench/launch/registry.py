"""The built-in launchers by name (--kb-launcher). Adding one: a file launch/<name>.py with a class
satisfying base.Launcher, and its one line here. A launcher from outside the package answers the
`pytest_kb_make_launcher` hook instead (hookspec.py); plugin.py asks the hook first."""
from __future__ import annotations

import importlib

from typing import TYPE_CHECKING

from .base import Launcher

if TYPE_CHECKING:
    from ..options import Settings

# name -> "module:class" under launch/, imported only when chosen (torchrun's module stays unloaded
# under fork, a Slurm launcher's off a cluster)
BUILTIN = {
    "fork": "fork:ForkLauncher",
    "torchrun": "torchrun:TorchrunLauncher",
    "slurm": "slurm:SlurmLauncher",
}


def make(name: str, settings: Settings | None = None) -> Launcher | None:
    """A new built-in launcher (its class called with the run's settings, None in tests), or None
    for a name that is not one."""
    where = BUILTIN.get(name)
    if where is None:
        return None
    module, cls = where.split(":")
    launcher: Launcher = getattr(importlib.import_module(f"{__package__}.{module}"), cls)(settings)
    return launcher


def known() -> str:
    """The built-in names as a usage error lists them: "fork, torchrun or slurm"."""
    names = list(BUILTIN)      # in the order the option's help names them
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
