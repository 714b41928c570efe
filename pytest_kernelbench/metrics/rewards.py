"""Rewards for training, apart from verdicts: a record's verdict never changes with a reward formula,
and a reward is recomputed from stored records at any time (`kernelbench reward REPORT --preset`).

Each preset is one table entry with a version: a formula that changes gets a new version, so a
reward logged in a training run names exactly what computed it (published environments shipped
reward bugs that could not be traced afterwards). Rules every preset shares, decided here once:

- a record whose disposition is not valid (retryable: the infrastructure's; skipped) has no reward
  (None), never 0: a trainer drops or re-runs it instead of punishing the policy for a lost GPU;
- a cheat verdict (CHEATS) is the fixed CHEAT_PENALTY, below any honest failure;
- speed terms read the record's `score` (geometric mean over sizes of the paired speedups, on a
  GPU); on a CPU it is not a speed (None), and a speed term then counts as no speedup.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..protocol import Disposition, Failure, Outcome, disposition_of

# the verdicts of a candidate that tried to pass without doing the work, or to reach outside
CHEATS = frozenset({Failure.FORBIDDEN_CALL, Failure.UNSAFE, Failure.EDIT_OUTSIDE_REGION, Failure.REFERENCE_COPY,
                    Failure.FORBIDDEN_CONSTRUCT})
CHEAT_PENALTY = -1.0


def components(record: dict) -> dict[str, Any]:
    """What every preset reads off a record (and a trainer may log as it is)."""
    disposition = disposition_of(record.get("outcome"))
    valid = disposition == Disposition.VALID
    failure = record.get("failure")
    score = record.get("score")
    return {"disposition": str(disposition), "correct": (record.get("outcome") == Outcome.PASSED) if valid else None,
            "failure": failure, "cheat": bool(valid and failure in CHEATS),
            "speedup": score if isinstance(score, (int, float)) else None,
            "speed_measured": isinstance(score, (int, float)), "verdict": record.get("verdict"),
            "band": record.get("band")}


@dataclass(frozen=True)
class Preset:
    name: str
    version: int
    passed: Callable[[float | None], float]      # reward of a correct candidate, from its speedup (None: unmeasured)
    failed: float                               # reward of an honest failure
    what: str
    source: str = "ours"


def _speed(s: float | None) -> float:
    return s if s is not None and s > 0 else 1.0      # unmeasured (CPU): no speedup, no slowdown


LOG_SPEEDUP_CAP = math.log(4.0)     # 4x and beyond earn the same: one lucky size cannot dominate a batch
LOG_SPEEDUP_FLOOR = -0.5            # a correct but slow kernel still beats a failure (1 + floor > 0)

PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("binary", 1, lambda s: 1.0, 0.0, "1 if correct, else 0"),
    Preset("fast_p", 1, lambda s: 1.0 if s is not None and s > 1.0 else 0.0, 0.0,
           "1 if correct and faster than the reference (speedup > 1.0, KernelBench's fast_1), else 0"),
    Preset("log_speedup", 1, lambda s: 1.0 + min(LOG_SPEEDUP_CAP, max(LOG_SPEEDUP_FLOOR, math.log(_speed(s)))), 0.0,
           "correct: 1 + ln(speedup) clipped to [-0.5, ln 4]; failed: 0"),
    # Kevin-32B (Cognition, https://cognition.ai/blog/kevin-32b; arXiv 2507.11948): a kernel's score
    # is 0.3 for correctness plus its speedup over the baseline (T_baseline / T_kernel), 0 when
    # incorrect. Their multi-turn credit (a discounted sum over later turns, gamma 0.4) is the
    # trainer's to apply over a trajectory; this is the per-turn score it sums.
    Preset("kevin", 1, lambda s: 0.3 + (s if s is not None else 0.0), 0.0,
           "correct: 0.3 + speedup (Kevin-32B's per-turn score); failed: 0", source="kevin"),
    # Dr. Kernel / KernelGYM (arXiv 2602.05885; github.com/hkust-nlp/KernelGYM,
    # drkernel/kernel/rewards/reward_client.py `calculate_reward_weighted`, the training script's
    # default): init_correct_weight * correct + init_performance_weight * [speedup >= 1 + speedup_eps],
    # weights 1.0 and 1.0, speedup_eps 0.01, penalty_score 0 for a failure. Their profiling-based
    # coverage term (custom kernels' share of CUDA time) needs a profiler our records do not carry.
    Preset("drkernel", 1, lambda s: 1.0 + (1.0 if s is not None and s >= 1.01 else 0.0), 0.0,
           "correct: 1 + [speedup >= 1.01] (Dr. Kernel's calculate_reward_weighted); failed: 0",
           source="drkernel"),
)}


def reward(record: dict, preset: str) -> float | None:
    """The preset's reward of one record (a dict, as the report has it); None when it has no
    verdict on the candidate."""
    p = preset_named(preset)
    c = components(record)
    if c["disposition"] != Disposition.VALID:
        return None
    if c["cheat"]:
        return CHEAT_PENALTY
    return float(p.passed(c["speedup"])) if c["correct"] else p.failed


def preset_named(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown reward preset {name!r} (presets: {', '.join(PRESETS)})") from None


def reward_entry(record: dict, preset: str) -> dict:
    p = preset_named(preset)
    return {"preset": p.name, "version": p.version, "value": reward(record, preset)}


def table_lines(records: list[dict], preset: str) -> list[str]:
    """One line per record, then the mean over records that have a reward (retryable ones apart)."""
    p = preset_named(preset)
    lines = [f"reward preset {p.name} v{p.version}: {p.what}", ""]
    values: list[float] = []
    retry = 0
    for rec in records:
        value = reward(rec, preset)
        c = components(rec)
        if value is None:
            retry += c["disposition"] == Disposition.RETRYABLE
            shown = f"-  ({c['disposition']})"
        else:
            values.append(value)
            shown = f"{value:.3f}" + ("  (cheat)" if c["cheat"] else "")
        lines.append(f"{rec.get('problem')}: {shown}  {rec.get('outcome')}"
                     + (f" {rec.get('failure')}" if rec.get("failure") else ""))
    mean = f"{sum(values) / len(values):.3f}" if values else "-"
    lines += ["", f"mean reward {mean} over {len(values)} record(s) with a verdict; "
                  f"{retry} retryable (no reward: run again)"]
    return lines
