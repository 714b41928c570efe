"""The fixtures a problem item takes, and the item's stash keys. kb_candidate is the one place a
candidate source is chosen: files (reference, shipped, a directory), or a model (--kb-model)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pytest

from .candidates.files import CandidateError, NoCandidate, choose, from_directory
from .pkb import static
from .pkb.checkout import is_pkb
from .protocol import SOLUTIONS_ONLY_SKIP, Outcome
from .session import Skip, base_record

if TYPE_CHECKING:
    from .candidates import Candidate
    from .candidates.llm import ModelSource
    from .report.record import ItemRecord
    from .session import KBSession
    from .spec.problem import Placement, Problem

RUN_PLUGIN = "kernelbench-run"          # the BenchRun object's name in the plugin manager
KB_PROBLEM: pytest.StashKey[Problem] = pytest.StashKey()      # item -> its Problem
RECORDS: pytest.StashKey[list[ItemRecord]] = pytest.StashKey()   # item -> the records it produced (one per sample/round)


def emit(node: pytest.Item, record: ItemRecord) -> None:
    node.stash.setdefault(RECORDS, []).append(record)


def _skip(request: pytest.FixtureRequest, problem: Problem, reason: str,
          candidate: Candidate | None = None) -> NoReturn:
    rec = base_record(problem, candidate, request.node.nodeid)
    rec.end(Outcome.SKIPPED, message=reason)
    emit(request.node, rec)
    pytest.skip(reason)


@pytest.fixture
def kb_session(request: pytest.FixtureRequest) -> KBSession:
    run = request.config.pluginmanager.get_plugin(RUN_PLUGIN)
    if run is None:
        pytest.skip("the kernelbench plugin is not active")
    return run.session


@pytest.fixture
def kb_problem(request: pytest.FixtureRequest) -> Problem:
    problem = request.node.stash.get(KB_PROBLEM, None)
    if problem is None:
        pytest.skip("not a kernelbench problem item")
    return problem


@pytest.fixture
def kb_placement(request: pytest.FixtureRequest, kb_session: KBSession, kb_problem: Problem) -> Placement:
    s = kb_session.settings
    if s.solutions_only and from_directory(kb_problem, Path(s.solutions), s.pkb_backend).source is None:
        # first: a problem left out is left out for this reason alone, wherever it could run
        _skip(request, kb_problem, SOLUTIONS_ONLY_SKIP)
    try:
        placement = kb_session.place(kb_problem)
    except Skip as e:
        reason = str(e)
    else:
        missing = is_pkb(kb_problem) and static.missing_modules(
            kb_problem.reference_path.read_text(), kb_problem.reference_path.resolve().parent.parent)
        if not missing:
            return placement
        reason = missing
    # outside the except: a failure here is one exception, not one chained to the Skip
    _static_then_skip(request, kb_session, kb_problem, reason)


def _static_then_skip(request: pytest.FixtureRequest, session: KBSession, problem: Problem, reason: str) -> NoReturn:
    """A PKB item that cannot run here still puts its candidate from --kb-solutions through the
    cheap stages (pkb/static.py): a missing, unparsable or unsafe file fails as it would on GPUs,
    so a CPU run gives the census; any other candidate skips with the item's reason."""
    s = session.settings
    candidate = None
    if is_pkb(problem) and s.solutions:
        candidate = choose(problem, "cuda", s.candidate, s.solutions, s.pkb_backend)
        found = static.verdict(candidate, s.allow_multicast)
        if found:
            rec = base_record(problem, candidate, request.node.nodeid)
            rec.end(Outcome.FAILED, *found)
            emit(request.node, rec)
            pytest.fail(f"{found[0]}: {found[1]}", pytrace=False)
    _skip(request, problem, reason, candidate)


@pytest.fixture
def kb_candidate(request: pytest.FixtureRequest, kb_session: KBSession, kb_problem: Problem,
                 kb_placement: Placement) -> Candidate | ModelSource:
    s = kb_session.settings
    if s.print_prompt or s.model:
        reason = kb_session.cpu_candidate_skip(kb_problem, kb_placement, is_reference=False)
        if reason:                                   # before any prompt is built or call is made
            _skip(request, kb_problem, reason)
        from .candidates.llm import ModelSource
        kb_session.prefetch_shapes([i.stash.get(KB_PROBLEM, None) for i in request.session.items])
        source = ModelSource(s, kb_session.rootdir, kb_session.run_dir, kb_session.machine, kb_problem, kb_placement)
        if s.print_prompt:
            _skip(request, kb_problem, f"prompt written: {source.write_prompt()}")
        return source
    try:
        candidate = choose(kb_problem, kb_placement.device, s.candidate, s.solutions, s.pkb_backend)
    except NoCandidate as e:
        _skip(request, kb_problem, str(e))
    except CandidateError as e:      # shipped:NAME that does not exist: the user's mistake
        pytest.fail(str(e), pytrace=False)
    reason = kb_session.cpu_candidate_skip(kb_problem, kb_placement, candidate.is_reference)
    if reason:
        _skip(request, kb_problem, reason, candidate)
    if kb_placement.device == "cpu" and is_pkb(kb_problem) and not candidate.is_reference:
        # PKB's candidates are mostly CUDA/Triton: on a CPU item they skip (after the cheap stages)
        found = static.verdict(candidate, s.allow_multicast)
        if found:
            candidate.failure = found            # recorded by run_item, before any launch
        elif why := static.needs_cuda(candidate.source):
            _skip(request, kb_problem, why, candidate)
    return candidate
