"""The collectors: a problem folder's problem.yaml is one item (ProblemFile -> ProblemItem, whose
body is testcase.test_problem), a folder that does not load is a BrokenProblem that fails with the
reason, and --kb-pkb's checkout is a PkbSuite of PkbReference files (plugin.py's collection hooks
return them)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .fixtures import KB_PROBLEM, RECORDS, RUN_PLUGIN
from .pkb import checkout as pkb_checkout
from .protocol import Failure, Outcome
from .session import base_record
from .spec.problem import ProblemError, load_problem
from .testcase import test_problem

if TYPE_CHECKING:
    from .spec.problem import Problem


class ProblemItem(pytest.Function):
    """One problem's test. Its headline in failure reports is its own name (the default, built
    from the test function's module path, read `.<checkout folder>.problems.<category>...`)."""

    def reportinfo(self):
        return self.path, 0, self.name     # line 0: skip reports need a line number


class ProblemFile(pytest.File):
    def collect(self):
        root = problems_root(self.path)
        # no originalname: pytest >= 9.2 builds the node id from originalname plus a callspec, and
        # this item has no callspec (one item per folder), which would drop "[<category>/<name>]"
        name = f"test_problem[{self.path.parent.relative_to(root).as_posix()}]"
        try:
            problem = load_problem(self.path, root)
        except ProblemError as e:
            # this problem fails alone, as an item with the reason; the others run
            yield BrokenProblem.from_parent(self, name=name, error=str(e))
            return
        item = ProblemItem.from_parent(self, name=name, callobj=test_problem)
        item.stash[KB_PROBLEM] = problem
        for marker in problem.markers:
            item.add_marker(marker)
        yield item


class BrokenProblem(pytest.Item):
    """A problem folder that does not load: the item fails with the loader's one-line reason and
    its record (outcome error, failure invalid_problem) counts in the run like any other item."""

    def __init__(self, *, error: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.error = error

    def runtest(self):
        rec = base_record(None, None, self.nodeid)
        rec.end(Outcome.ERROR, Failure.INVALID_PROBLEM, self.error)
        self.stash[RECORDS] = [rec]
        raise ProblemError(self.path, self.error)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        return self.error

    def reportinfo(self):
        return self.path, 0, self.name     # line 0: skip reports need a line number


class PkbSuite(pytest.Directory):
    """--kb-pkb: a ParallelKernelBench checkout's reference/ folder; one item per reference (nothing
    else in it is collected, and none of its code is imported here)."""

    def collect(self):
        for stem, problem in pkb_problems(self.config):
            # node ids without this machine's paths, that pytest takes back: pkb/<stem>.py::test_problem[...]
            yield PkbReference.from_parent(self, path=self.path / f"{stem}.py", problem=problem,
                                           nodeid=f"{pkb_checkout.PREFIX}/{stem}.py")


class PkbReference(pytest.File):
    def __init__(self, *, problem: Problem | ProblemError, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.problem = problem

    def collect(self):
        name = f"test_problem[{pkb_checkout.PREFIX}/{self.path.stem}]"
        if isinstance(self.problem, ProblemError):
            yield BrokenProblem.from_parent(self, name=name, error=str(self.problem))
            return
        item = ProblemItem.from_parent(self, name=name, callobj=test_problem)
        item.stash[KB_PROBLEM] = self.problem
        for marker in pkb_checkout.markers(self.problem):
            item.add_marker(marker)
        yield item


def pkb_problems(config: pytest.Config) -> list:
    run = config.pluginmanager.get_plugin(RUN_PLUGIN)
    if run is None or not run.settings.pkb:     # no run (the plugin inactive) or no --kb-pkb
        return []
    settings = run.settings
    cache = run.rootdir / (settings.cache_dir or ".kb-cache")
    return pkb_checkout.load_problems(Path(settings.pkb), cache)


def problems_root(yaml_path: Path) -> Path:
    """problems/<category>/<name>/problem.yaml -> problems/ (ids are '<category>/<name>')."""
    return yaml_path.parent.parent.parent
