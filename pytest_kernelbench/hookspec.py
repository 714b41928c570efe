"""Hooks pytest-kernelbench adds to pytest (registered by plugin.py with
`pluginmanager.add_hookspecs`). Implement them in a conftest.py or a plugin."""
from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .launch.base import Launcher


@pytest.hookspec(firstresult=True)
def pytest_kb_make_launcher(config: pytest.Config, name: str) -> Launcher | None:
    """Return the launcher that starts every job's ranks, for ``--kb-launcher=NAME``, or None to
    leave the name to other implementations.

    The result must satisfy ``pytest_kernelbench.launch.base.Launcher``: ``name``, ``prepare()``,
    ``start(job_dir, nproc, env, cwd)`` returning the job's ``Ranks``, and ``close()``. The plugin
    keeps the deadline, the compile budget, the process hunt, the tree checks and the key service
    for every launcher; a launcher only starts, polls, stops and reports ranks (its ``Ranks``
    writes logs/exits.json as ``protocol.ExitFacts``).

    The built-in launchers (``fork``, ``torchrun``; ``launch/registry.py``) answer last, so an
    implementation may also replace one of them by its name, or wrap it (return a launcher whose
    ``start`` calls the built-in's). A name no implementation answers is a usage error.

    Stops at first non-None result, see :ref:`firstresult`.

    :param config: The pytest config object.
    :param name: The value of ``--kb-launcher`` (ini ``kb_launcher``).
    """
