"""The words every stage uses: outcomes, failure categories, dispositions, tiers, rules, and the
environment every job's processes get (standard library only)."""
from __future__ import annotations

import enum
from pathlib import Path

PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent.parent)   # the folder holding the package
# marks a heartbeat phase whose time is on the compile budget, not the item's deadline
SETUP_MARK = "(first call: setup/compile)"
# what every job's processes get so that NCCL, torch symmetric memory and NVSHMEM never use NVLink
# multicast (it can take a shared host's GPUs out of service), and the variables a candidate may
# not change (checked in its process, through os.environ and libc, and from outside it)
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
GUARDED_ENV = (*MULTICAST_OFF, "CUDA_VISIBLE_DEVICES")
# the shared-device placement (--kb-oversubscribe, docs/one-gpu.md): several ranks on one GPU. torch's
# own switch lets symmetric memory rendezvous ranks whose devices overlap (refused otherwise); NCCL
# refuses two ranks on one device, so both process groups go over gloo. Never timed: what such a run
# says, on every surface (record.speed, the table, the leaderboard, compare)
SHARED_ENV = {"TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES": "1"}
SHARED_PLACEMENT = "shared"
SHARED_NO_SPEED = "shared GPU: correctness only, no speed"


class Outcome(enum.StrEnum):
    """An item's outcome. StrEnum: a member is its value in str(), f-strings, JSON and comparisons."""
    PASSED = "passed"
    FAILED = "failed"       # the candidate's doing: one Failure category
    ERROR = "error"         # no result, for a reason that is not the candidate's (still counted)
    SKIPPED = "skipped"     # cannot run here; counted apart, with its reason


# outcomes whose items count in every rate (skipped items are counted apart)
COUNTED = (Outcome.PASSED, Outcome.FAILED, Outcome.ERROR)
# the skip reason of a problem --kb-solutions-only leaves out (the table lists such items as one line)
SOLUTIONS_ONLY_SKIP = "no file for it in --kb-solutions (--kb-solutions-only)"


class Tier(enum.StrEnum):
    """The speed verdict of a passed item."""
    BETTER = "better"
    ON_PAR = "on_par"
    DEGRADED = "degraded"
    SEVERELY_DEGRADED = "severely_degraded"


# speed verdict tiers: (name, lowest speedup of the tier), best first; a score whose noise band
# holds 1.0 is on_par whatever its value (metrics.verdict)
TIERS = ((Tier.BETTER, 1.20), (Tier.ON_PAR, 0.95), (Tier.DEGRADED, 0.60), (Tier.SEVERELY_DEGRADED, 0.0))
SLOW_TIERS = frozenset({Tier.DEGRADED, Tier.SEVERELY_DEGRADED})
GOOD_TIERS = frozenset({Tier.BETTER, Tier.ON_PAR})


def tier(score: float | None) -> Tier | None:
    if score is None:
        return None
    for name, lower in TIERS:
        if score >= lower:
            return name
    return TIERS[-1][0]


class Failure(enum.StrEnum):
    """An item's failure category (outcome failed: the candidate's; outcome error: not its own)."""
    # the candidate's
    NO_CODE = "no_code"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    CRASH = "crash"
    MISMATCH = "mismatch"
    TIMEOUT = "timeout"
    FORBIDDEN_CALL = "forbidden_call"
    UNSAFE = "unsafe"
    EDIT_OUTSIDE_REGION = "edit_outside_region"     # native: a change outside the template's EDIT regions
    FORBIDDEN_CONSTRUCT = "forbidden_construct"     # native: region code reaching outside (header, system(), asm, ...)
    REFERENCE_COPY = "reference_copy"   # the problem's own reference handed back (candidates/copies.py): no effort
    # not the candidate's (outcome error)
    API_ERROR = "api_error"
    INVALID_PROBLEM = "invalid_problem"
    HARNESS_ERROR = "harness_error"


NOT_THE_CANDIDATES = frozenset({Failure.API_ERROR, Failure.INVALID_PROBLEM, Failure.HARNESS_ERROR})
CANDIDATE_FAILURES = tuple(f for f in Failure if f not in NOT_THE_CANDIDATES)


class Disposition(enum.StrEnum):
    """Whose outcome a record is: a verdict on the candidate, or none (for a trainer: a retryable
    record is run again, never scored as a zero; for a leaderboard: counted apart)."""
    VALID = "valid"            # passed, or failed for one of CANDIDATE_FAILURES: the candidate's
    RETRYABLE = "retryable"    # the infrastructure's (harness_error, api_error, invalid_problem, a lost GPU,
                               # the deadline met while queued): no verdict on the candidate
    SKIPPED = "skipped"        # cannot run here (no GPU, a world size that does not fit): not the candidate's


def disposition_of(outcome: object) -> Disposition:
    """The one rule: an outcome of PASSED or FAILED is the candidate's; ERROR (or none: the item
    ended without a result) the infrastructure's; SKIPPED neither's."""
    if outcome in (Outcome.PASSED, Outcome.FAILED):
        return Disposition.VALID
    return Disposition.SKIPPED if outcome == Outcome.SKIPPED else Disposition.RETRYABLE


# the categories whose job log tail says why (the candidate's own prints and stack): shown in the
# pytest failure text and in the model's feedback
SHOWS_LOG_TAIL = frozenset({Failure.CRASH, Failure.RUNTIME_ERROR, Failure.COMPILE_ERROR, Failure.TIMEOUT})


# what a candidate process may name as its own failure (Failed, Done.failed): its account is read,
# never trusted, so anything else it names (harness_error, an unknown word) is its runtime_error
SELF_REPORTED = frozenset({Failure.COMPILE_ERROR, Failure.RUNTIME_ERROR, Failure.FORBIDDEN_CALL, Failure.UNSAFE})


def reported_category(category: object) -> Failure:
    """The category a candidate process's own account of its failure gives: only its own."""
    if isinstance(category, str) and category in SELF_REPORTED:
        return Failure(category)
    return Failure.RUNTIME_ERROR


def outcome_of(category: str) -> Outcome:
    """The outcome a failure category gives: failed when it is the candidate's doing, else error."""
    return Outcome.FAILED if category in CANDIDATE_FAILURES else Outcome.ERROR

# Rules stricter than ParallelKernelBench's own check (allclose after a cast to float, dtype and
# barriers free): a failure message caused only by one of them ends with "(rule: <name>)", and
# the item's record carries it as record["rule"], so PKB-comparable numbers can be read off a report.
RULES = {
    "exact_integers": "integer and bool outputs must match exactly (PKB: allclose at the tolerance)",
    "dtype": "output dtypes must match the reference's (PKB: compares values only)",
    "forbidden_barrier": "dist.barrier() is a forbidden collective (PKB's prompt example calls it)",
}


def tagged(message: str, rule: str) -> str:
    return f"{message} (rule: {rule})"


def rule_of(message: str | None) -> str | None:
    """The rule a failure message says it failed only by, if any."""
    if message and message.endswith(")") and "(rule: " in message:
        name = message.rsplit("(rule: ", 1)[1][:-1]
        return name if name in RULES else None
    return None


