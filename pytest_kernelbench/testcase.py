"""The test every problem runs (its fixtures are in fixtures.py): one candidate through
session.run_item, or a model's samples and refinement rounds."""
from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .candidates import Candidate
from .fixtures import emit
from .protocol import SHOWS_LOG_TAIL, Failure, Outcome
from .session import base_record

if TYPE_CHECKING:
    from .candidates.llm import ModelSource
    from .report.record import ItemRecord
    from .session import KBSession
    from .spec.problem import Placement, Problem


def test_problem(request: pytest.FixtureRequest, kb_session: KBSession, kb_problem: Problem, kb_placement: Placement,
                 kb_candidate: Candidate | ModelSource) -> None:
    if not isinstance(kb_candidate, Candidate):          # a model writes the candidates
        return _run_model(request, kb_session, kb_problem, kb_placement, kb_candidate)
    record = kb_session.run_item(kb_problem, kb_candidate, kb_placement, request.node.nodeid)
    emit(request.node, record)
    if record.outcome == Outcome.SKIPPED:        # it cannot run here (a shared GPU and a candidate calling NCCL)
        pytest.skip(str(record.message))
    if record.outcome != Outcome.PASSED:
        pytest.fail(failure_text(record), pytrace=False)


def failure_text(rec: ItemRecord) -> str:
    text = f"{rec.failure}: {rec.message}"
    if rec.log_tail and rec.failure in SHOWS_LOG_TAIL:
        text += f"\n{rec.log_tail[-2000:]}"
    return text


# ---- candidates from a model: k samples, each refined up to R rounds ---------------------------
def _run_model(request: pytest.FixtureRequest, session: KBSession, problem: Problem, placement: Placement,
               source: ModelSource) -> None:
    """Every round of every sample is recorded as it finishes (so a pytest-timeout keeps the
    rounds done); the sample's result is its best round: the fastest passing one, else the last
    failing one. The best round's record is marked record["best"] (report.latest_by_item keeps
    it) and carries the sample's cost over all its rounds and a summary of every round."""
    from .candidates import llm, prompt
    s = session.settings
    nodeid = request.node.nodeid
    finals: list[ItemRecord] = []

    def emit_(rec: ItemRecord) -> None:
        emit(request.node, rec)
    for k in range(s.samples):
        sample = k if s.samples > 1 else None
        history: list[llm.Round]
        rounds: list[ItemRecord] = []
        calls: list[dict] = []
        history, stopped = [], None
        for r in range(1, s.rounds + 1):
            try:
                cand, answer, call = source.generate(k, r, history)
            except llm.Skipped as e:
                stopped = str(e)
                break
            except llm.ApiFailure as e:
                rec = base_record(problem, None, nodeid, sample)
                rec.device, rec.world_size = placement.device, placement.world_size
                rec.end(Outcome.ERROR, Failure.API_ERROR, e.message)
                rec.round, rec.llm = r, {"model": s.model, "sample": k, "round": r, **e.info}
                rounds.append(rec)
                emit_(rec)
                stopped = e.message
                break
            calls.append(call)
            rec = session.run_item(problem, cand, placement, nodeid, sample)
            rec.round, rec.llm = r, call
            rounds.append(rec)
            emit_(rec)
            # the model's feedback reads the record as the report has it
            if not prompt.needs_refinement(rec.to_dict(), placement.device):
                break
            history.append(llm.Round(cand, answer, rec.to_dict()))
        if not rounds:
            rec = base_record(problem, None, nodeid, sample)
            rec.device, rec.world_size = placement.device, placement.world_size
            rec.end(Outcome.SKIPPED, message=stopped)
            finals.append(rec)
            emit_(rec)
            continue
        best = _best_round(rounds)
        for rec in rounds:
            rec.best = rec is best
            rec.cost = None
        best.cost = llm.cost_of(calls)
        best.rounds = [_round_summary(rec) for rec in rounds]
        if stopped and rounds[-1].outcome != Outcome.ERROR:
            best.refinement_stopped = stopped
        finals.append(best)
    _verdict(finals)


def _best_round(rounds: list[ItemRecord]) -> ItemRecord:
    passed = [r for r in rounds if r.outcome == Outcome.PASSED]
    if passed:
        return max(passed, key=lambda r: (r.score or 0.0, -(r.round or 0)))
    failed = [r for r in rounds if r.outcome == Outcome.FAILED]
    return (failed or rounds)[-1]


def _round_summary(rec: ItemRecord) -> dict:
    call = rec.llm or {}
    return {"round": rec.round, "outcome": rec.outcome, "failure": rec.failure,
            "message": (rec.message or "")[:300], "score": rec.score,
            "candidate_sha256": (rec.candidate or {}).get("sha256"), "cached": call.get("cached")}


def _verdict(finals: list[ItemRecord]) -> None:
    done = [f for f in finals if f.outcome != Outcome.SKIPPED]
    if not done:
        pytest.skip(finals[0].message or Outcome.SKIPPED)
    bad = [f for f in done if f.outcome != Outcome.PASSED]
    if not bad:
        return

    def text(rec: ItemRecord) -> str:
        t = failure_text(rec)
        if len(rec.rounds or []) > 1:
            t = f"(best of {len(rec.rounds or [])} rounds: round {rec.round}) {t}"
        return t
    if len(finals) == 1:
        pytest.fail(text(bad[0]), pytrace=False)
    lines = [f"{len(bad)} of {len(finals)} samples did not pass:"]
    lines += [f"sample {f.sample}: {text(f)}" for f in bad]
    pytest.fail("\n".join(lines), pytrace=False)
