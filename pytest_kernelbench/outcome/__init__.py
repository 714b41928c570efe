"""What a finished job means: the outcome of one job, from what launching it did (launch's
`LaunchFacts`) and what its folder holds (`judge`; `classify` reads the folder alone).

A trusted result (every rank exited 0, every rank's done-file signed) is the worker's verdict;
otherwise the ranks' error files, heartbeats, logs and the exit codes (logs/exits.json, written by
every launcher as protocol.ExitFacts) are read to find the root cause: the rank that died, raised,
or stopped progressing, named with its phase and where it was, its peers after it. The reading of
the ranks' logs and tracebacks (log excerpts, without C++ frame dumps) is outcome/logs.py; the
judging is here.
"""
from __future__ import annotations

import json
import signal
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..launch import LaunchFacts
from ..launch.jobs import read_heartbeats, read_phases, setup_phase
from ..protocol import ExitFacts, Failure, JobLayout, Outcome, done_mark, outcome_of
from .logs import (TAIL_CHARS, clean_log, drop_cpp_frames, exception_text, harness_frame, logs_tail, lost_peer,
                   raised_at, stopped_at, tail, trim_traceback, waited_error, watchdog_line)

__all__ = ["LaunchOutcome", "classify", "clean_log", "deadline_message", "drop_cpp_frames", "judge", "logs_tail",
           "read_heartbeats", "read_phases", "setup_phase"]


@dataclass
class LaunchOutcome:
    status: Outcome                # passed | failed | error
    category: Failure | str | None = None    # failure category (protocol.Failure)
    message: str = ""
    result: dict | None = None     # the worker's result.json when trusted
    returncode: int | None = None
    wall_s: float = 0.0
    compile_s: float = 0.0
    rank_phases: dict = field(default_factory=dict)
    killed: list = field(default_factory=list)   # stray processes killed after the job
    log_tail: str = ""
    warnings: list = field(default_factory=list)


def judge(facts: LaunchFacts) -> LaunchOutcome:
    """The outcome of a launched job: what launching it did (launch.run_job) and what its folder holds."""
    job_dir = Path(facts.job_dir)
    if facts.error:
        return LaunchOutcome(Outcome.ERROR, Failure.HARNESS_ERROR, facts.error, wall_s=facts.wall_s, log_tail=logs_tail(job_dir))
    if facts.timed_out:
        out = LaunchOutcome(Outcome.FAILED, Failure.TIMEOUT,
                            deadline_message(facts.timed_out, job_dir, facts.phases, facts.candidate_path),
                            returncode=facts.returncode, log_tail=logs_tail(job_dir))
    else:
        rc = facts.returncode if facts.returncode is not None else -1
        out = classify(job_dir, facts.token, facts.nproc, rc, facts.key, facts.candidate_path)
        if facts.truncated:
            out.message += f" [log truncated: {', '.join(facts.truncated)} exceeded {_size(facts.log_limit)}]"
    out.wall_s, out.compile_s, out.rank_phases, out.killed = facts.wall_s, facts.compile_s, facts.phases, facts.killed
    if facts.tree_changed:
        changed = facts.tree_changed
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        out.message = (f"the job modified the problem tree (undone; changed files kept in "
                       f"{facts.quarantine}): {shown}"
                       + (f"; before that: {out.category}: {out.message}" if out.category else ""))
        out.status, out.category, out.result = Outcome.FAILED, Failure.FORBIDDEN_CALL, None
    return out


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def classify(job_dir: Path, token: str, nproc: int, rc: int, key: str | None = None,
             candidate_path: str | None = None) -> LaunchOutcome:
    layout = JobLayout(job_dir)
    errors = []
    for f in layout.errors.glob("rank*.json"):
        try:
            errors.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            pass
    result_path = layout.result
    result_bytes = result_path.read_bytes() if result_path.is_file() else b""
    done = {int(f.name[4:]) for f in layout.marks.glob("rank*")
            if f.name[4:].isdigit() and f.read_text() == done_mark(key, token, int(f.name[4:]),
                                                                    result_bytes if f.name == "rank0" else b"")
            } if layout.marks.is_dir() else set()
    if rc == 0 and len(done) == nproc and result_path.exists():
        try:
            result = json.loads(result_bytes)
        except ValueError as e:
            return LaunchOutcome(Outcome.FAILED, Failure.CRASH, f"unreadable result.json: {e}", returncode=rc)
        failure = result.get("failure")
        if failure:     # agreed by the checkers: the candidate's, or the harness's (a wrong baseline: error)
            return LaunchOutcome(outcome_of(failure["category"]), failure["category"], failure["message"], result=result,
                                 returncode=rc)
        return LaunchOutcome(Outcome.PASSED, None, "", result=result, returncode=rc)
    return _blame(job_dir, candidate_path, nproc, rc, errors, done)


def _error_outcome(job_dir: Path, e: dict, rc: int | None) -> LaunchOutcome:
    msg = f"rank {e['rank']}: {drop_cpp_frames(e['message'])}"
    tb = drop_cpp_frames(e.get("traceback", "")).strip()
    if tb and e.get("where") == "candidate":
        msg += "\n" + trim_traceback(tb)
    # a fault of the harness (its inputs()/cost(), or the plugin's own code) is no verdict on the
    # candidate: outcome error, with the frame where it happened
    status = outcome_of(e["category"])
    if status == Outcome.ERROR:
        frame = harness_frame(tb)
        if frame:
            msg += f" (at {frame})"
    return LaunchOutcome(status, e["category"], msg, returncode=rc, log_tail=logs_tail(job_dir, {e["rank"]}))


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


# ---- who stopped, who waited ----------------------------------------------------------------------
# A rank that stops progressing (a hang in candidate code) shows up as its peers' failure: they
# time out in the next collective (gloo raises, the NCCL watchdog aborts the process), and the
# launcher then stops the rank that hung, which reports nothing. The blame goes to the rank that stopped,
# with its phase (heartbeat) and where it was (the Python stack it dumps on SIGTERM, see
# worker.main), and the peers' phases and errors after it.

def candidate_phase(phase: str) -> bool:
    """A phase in which candidate code runs (not one in which the harness waits for peers)."""
    return "candidate call" in phase or phase.endswith(", candidate") or phase == "import candidate"


def failed_exits(job_dir: Path) -> tuple[dict[int, int], int | None, str]:
    """The ranks that exited non-zero (-N: killed by signal N), the first of them, and the
    launcher's own log (logs/exits.json, whichever launcher wrote it)."""
    facts = ExitFacts.read(JobLayout(job_dir).exits)
    if facts is None:
        return {}, None, ""
    log = tail(JobLayout(job_dir).logs / facts.log, 20000) if facts.log else ""
    return facts.failed(), facts.root_cause, log


def _rank_states(job_dir: Path, candidate_path: str | None, nproc: int, errors: list,
                 exits: dict[int, int] | None = None) -> dict[int, dict]:
    beats = read_heartbeats(job_dir)
    by_rank: dict[int, dict] = {}
    for e in errors:
        by_rank.setdefault(e["rank"], e)
    exits = exits or {}
    states = {}
    for r in range(nproc):
        log = tail(JobLayout(job_dir).log(r), 20000)
        t, phase = beats.get(r, (0.0, ""))
        states[r] = {"rank": r, "t": t, "phase": phase, "error": by_rank.get(r),
                     "exit": exits.get(r),
                     "watchdog": watchdog_line(log), "at": stopped_at(log, candidate_path)}
    return states


def _in_candidate(st: dict) -> bool:
    """Stopped inside candidate code: by its stack dump where there is one, else by its phase."""
    return st["at"]["in_candidate"] if st["at"] else candidate_phase(st["phase"])


def _describe(st: dict, with_error: bool = True) -> str:
    text = f"rank {st['rank']}: {st['phase'] or 'no phase reported'}"
    if st["at"] and st["at"]["where"]:
        text += f", at {st['at']['where']}"
    if with_error and st["error"]:
        text += f": {exception_text(st['error'])}"
    elif with_error and st["watchdog"]:
        text += f": {st['watchdog']}"
    return text


def _blamed(states: dict, stopped: list[int]) -> list[int]:
    """Among the ranks that were stopped, those that stopped progressing in candidate code (the
    earliest heartbeat's phase when they differ); [] when that cannot be told."""
    inside = [r for r in stopped if _in_candidate(states[r])]
    dumped = [r for r in inside if states[r]["at"]]
    if dumped:      # a stack dump is the better witness: a rank whose dump went missing (a loaded machine,
        inside = dumped     # a SIGKILL before it was written) is told by its phase only where none has one
    if not inside:
        return []
    first = min(inside, key=lambda r: states[r]["t"])
    return [r for r in inside if states[r]["phase"] == states[first]["phase"]]


def _still_calling(states: dict) -> list[int]:
    """The ranks that never returned from a candidate call (blocked in torch.distributed, say: a
    recv nobody sends) while some other rank returned from it and waits in the harness: they are
    where the job stopped, whatever their stacks show. [] when every rank is in a call, or none.
    Of several, a rank whose wait ended because a peer went away is a consequence: those still
    waiting when stopped come first, then those whose wait timed out."""
    calling = [r for r, st in states.items() if candidate_phase(st["phase"])]
    if not 0 < len(calling) < len(states):
        return []

    def tier(r: int) -> int:
        e = states[r]["error"]
        return 0 if e is None else 2 if lost_peer(e) else 1
    best = min(tier(r) for r in calling)
    return [r for r in calling if tier(r) == best]


def _who(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(str(r) for r in ranks)


def _stopped_head(states: dict, blamed: list[int], candidate_path: str | None = None) -> str:
    st = states[blamed[0]]
    at = st["at"]["where"] if st["at"] and st["at"]["where"] else None
    if at is None and st["error"]:      # no stack dump: where its own (waited) error left candidate code
        at = raised_at(st["error"].get("traceback", ""), candidate_path)
    where = f", at {at}" if at else ""
    return f'{_who(blamed)} stopped progressing in "{st["phase"]}"{where}'


def deadline_message(reason: str, job_dir: Path, phases: dict, candidate_path: str | None = None) -> str:
    """The deadline passed (every rank was then stopped): name the rank(s) that stopped progressing
    in candidate code while the others waited for them, else every rank's phase."""
    nproc = max(phases, default=-1) + 1
    states = {r: st for r, st in _rank_states(Path(job_dir), candidate_path, nproc, []).items() if r in phases}
    for r, st in states.items():
        st["phase"] = phases[r]
    if not states:
        return f"{reason} (no rank reported a phase)"
    blamed = _blamed(states, sorted(states)) or _still_calling(states)
    if blamed and len(blamed) < len(states):
        peers = "; ".join(_describe(states[r], False) for r in sorted(states) if r not in blamed)
        return (f"{_stopped_head(states, blamed)} ({reason}; {'its' if len(blamed) == 1 else 'their'} peers "
                f"were waiting for {'it' if len(blamed) == 1 else 'them'}: {peers})")
    return f"{reason} ({'; '.join(_describe(states[r], False) for r in sorted(states))})"


def _blame(job_dir: Path, candidate_path: str | None, nproc: int, rc: int, errors: list, done: set) -> LaunchOutcome:
    """The job failed without a trusted result: find the root cause among the ranks.
    1. a rank that died without a word (a signal other than the NCCL watchdog's abort, os._exit):
       `crash`; its peers then fail inside a collective.
    2. a rank whose own error is not a failed wait for peers: its category (runtime_error, ...).
    3. a rank stopped by the launcher in candidate code while its peers timed out waiting for it,
       or, where every error only says a rank waited in vain, the rank still in its call while
       others returned from theirs (_still_calling): `timeout` naming it (the rank that stopped
       progressing), then its peers. A peer's closed connection never leads.
    4. otherwise the first error, or the first rank the watchdog aborted (timed out waiting).
    Ranks that the launcher stopped (SIGTERM/SIGKILL) are consequences, unless rule 3 applies."""
    order = {"candidate": 0, "reference": 1, "harness": 2}
    # a peer's closed connection is a consequence: never the first error, wherever it was raised
    errors = sorted(errors, key=lambda e: (lost_peer(e), order.get(e.get("where"), 3), e.get("time", 0)))
    exits, root, launcher_log = failed_exits(job_dir)
    states = _rank_states(job_dir, candidate_path, nproc, errors, exits)
    summary = any(st["exit"] is not None for st in states.values())
    stop_codes = (-signal.SIGTERM, -signal.SIGKILL)

    def others(r: int, with_error: bool = True) -> str:
        rest = "; ".join(_describe(states[p], with_error) for p in sorted(states) if p != r)
        return f" (other ranks: {rest})" if rest else ""

    def first(ranks: Iterable[int]) -> list[int]:   # the launcher's root cause first, then by rank
        return sorted(ranks, key=lambda r: (r != root, r))

    silent = [r for r, st in states.items() if st["error"] is None and r not in done]
    dead = [r for r in silent if not states[r]["watchdog"] and (
        (states[r]["exit"] is not None and states[r]["exit"] not in stop_codes and states[r]["exit"] != 0)
        or (summary and rc != 0 and states[r]["exit"] is None))]
    if dead:
        r = first(dead)[0]
        st = states[r]
        how = _describe_exit(st["exit"] if st["exit"] is not None else 0)
        where = f' in "{st["phase"]}"' if st["phase"] else ""
        at = f", at {st['at']['where']}" if st["at"] and st["at"]["where"] else ""
        return LaunchOutcome(Outcome.FAILED, Failure.CRASH, f"rank {r} died ({how}) without reporting an error{where}{at}"
                             + others(r), returncode=rc,
                             log_tail=logs_tail(job_dir, {r}) or clean_log(launcher_log)[-TAIL_CHARS:])

    def reported(e: dict) -> LaunchOutcome:    # the rank's own error; a signal it died of after writing it is noted
        out = _error_outcome(job_dir, e, rc)
        code = states[e["rank"]]["exit"]
        if code is not None and code < 0 and code not in stop_codes:
            out.message += f" [rank {e['rank']} then died: {_describe_exit(code)}]"
        return out

    raised = [e for e in errors if not waited_error(e)]
    if raised:
        return reported(raised[0])
    waited = [r for r, st in states.items() if (st["error"] and waited_error(st["error"]))
              or (st["error"] is None and st["watchdog"])]
    stopped = [r for r in silent if not states[r]["watchdog"] and (states[r]["exit"] in stop_codes or not summary)]
    blamed = _blamed(states, stopped) if waited else []
    if waited and not blamed:
        # every error says only that a rank waited in vain (a timeout, a peer's connection closed:
        # consequences): the cause is the rank that never returned from its call while the others did
        blamed = _still_calling(states)
    if blamed:
        n = len(blamed)
        peers = "; ".join(_describe(states[p]) for p in sorted(states) if p not in blamed)
        msg = (f"{_stopped_head(states, blamed, candidate_path)} ({'its' if n == 1 else 'their'} peers timed out "
               f"waiting for {'it' if n == 1 else 'them'}: {peers})")
        own = [r for r in blamed if states[r]["error"]]
        if own:
            msg += f" [rank {own[0]}'s own wait then failed too: {exception_text(states[own[0]]['error'])}]"
        return LaunchOutcome(Outcome.FAILED, Failure.TIMEOUT, msg, returncode=rc,
                             log_tail=logs_tail(job_dir, set(blamed) | set(waited[:1])))
    if errors:
        out = reported(errors[0])
        if waited_error(errors[0]):
            out.message += others(errors[0]["rank"])
        return out
    aborted = [r for r in silent if states[r]["watchdog"]]
    if aborted:
        r = first(aborted)[0]
        st = states[r]
        how = _describe_exit(st["exit"]) if st["exit"] is not None else "aborted"
        return LaunchOutcome(Outcome.FAILED, Failure.CRASH, f'rank {r} died ({how}): it timed out waiting for its peers in '
                             f'"{st["phase"]}" ({st["watchdog"]})' + others(r, False),
                             returncode=rc, log_tail=logs_tail(job_dir, {r}))
    missing = sorted(set(range(nproc)) - done)
    if rc == 0:
        return LaunchOutcome(Outcome.FAILED, Failure.CRASH, f"every rank exited 0 but rank(s) {missing} never finished the "
                             "protocol (exited early?)", returncode=rc, log_tail=logs_tail(job_dir))
    return LaunchOutcome(Outcome.FAILED, Failure.CRASH, f"the job exited with {rc}; rank(s) {missing} did not finish",
                         returncode=rc, log_tail=clean_log(launcher_log)[-TAIL_CHARS:] + logs_tail(job_dir))
