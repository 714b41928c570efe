"""The test every problem runs, and the fixtures it takes. kb_candidate is the one place a
candidate source is chosen (files now; model generation plugs in here too)."""
from __future__ import annotations

import pytest

from .candidates.files import CandidateError, NoCandidate, choose
from .session import Skip, base_record


def _skip(request, problem, reason: str, candidate=None):
    rec = base_record(problem, candidate, request.node.nodeid)
    rec.update(outcome="skipped", message=reason)
    request.node.user_properties.append(("kb_result", rec))
    pytest.skip(reason)


@pytest.fixture
def kb_session(request):
    from .plugin import SESSION
    return request.config.stash[SESSION]


@pytest.fixture
def kb_problem(request):
    problem = getattr(request.node, "kb_problem", None)
    if problem is None:
        pytest.skip("not a kernelbench problem item")
    return problem


@pytest.fixture
def kb_placement(request, kb_session, kb_problem):
    try:
        return kb_session.place(kb_problem)
    except Skip as e:
        _skip(request, kb_problem, str(e))


@pytest.fixture
def kb_candidate(request, kb_session, kb_problem, kb_placement):
    s = kb_session.settings
    try:
        return choose(kb_problem, kb_placement.device, s.candidate, s.solutions)
    except NoCandidate as e:
        _skip(request, kb_problem, str(e))
    except CandidateError as e:
        pytest.fail(str(e), pytrace=False)


def test_problem(request, kb_session, kb_problem, kb_placement, kb_candidate):
    record = kb_session.run_item(kb_problem, kb_candidate, kb_placement, request.node.nodeid)
    request.node.user_properties.append(("kb_result", record))
    if record["outcome"] != "passed":
        text = f"{record['failure']}: {record['message']}"
        if record.get("log_tail") and record["failure"] in ("crash", "runtime_error", "timeout"):
            text += f"\n{record['log_tail'][-2000:]}"
        pytest.fail(text, pytrace=False)
