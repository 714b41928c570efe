"""Baselines per backend, inside a rank (spec/baselines.py says what they are): each one the job
lists is a trusted module with the reference's solution(), imported by the reference process next
to the reference and timed there in the same rounds (rank/timing.py: a baseline's window is a
reference-process window that names another module, Batch.module); never in the candidate's.

Once per size, before timing, the checker runs every baseline itself on fresh inputs and compares
its output with the reference's as it compares the candidate's: a wrong or failing baseline is the
harness's fault (harness_error naming it), never the candidate's. Its numbers never score: the
size's speedup stays the reference's; `vs` and `best_backend` only inform.
"""
from __future__ import annotations

import os
from typing import Any

from ..protocol import PEER_LOST, Failure
from . import checks, compare
from .stats import paired_speedup, size_band
from .timing import summarize


def failure(text: str, world: int) -> Failure:
    """Whose fault a baseline's failure is (the checker's rule for the reference's): the
    candidate's side where it lost its peers (a peer's rank stopped) or ran out of memory the
    candidate holds; else the harness's (a baseline is our code). A failure a candidate could cause
    is never an error, which a trainer would retry rather than score."""
    if (world > 1 and PEER_LOST.search(text)) or "OutOfMemoryError" in text or "out of memory" in text.lower():
        return Failure.RUNTIME_ERROR
    return Failure.HARNESS_ERROR


def modules(c: Any) -> dict[str, Any]:
    """The job's baselines as the checker loaded them (once a job; rank/files.load_module)."""
    loaded = getattr(c, "_baseline_modules", None)
    if loaded is None:
        from .files import load_module
        loaded = {}
        for name, path in c.job.baselines.items():
            try:
                loaded[name] = load_module(path, f"_kb_b_{name}_{os.urandom(4).hex()}", register=False)
            except Exception as e:  # noqa: BLE001 - our own file: the harness's fault
                c.die(Failure.HARNESS_ERROR, f"the baseline {name} did not import: {type(e).__name__}: {e}", "harness", e)
        c._baseline_modules = loaded
    return loaded


def check(run: Any) -> None:
    """Every baseline's output on one fresh input set of the size, compared with the reference's
    (the candidate's checks: tolerance, shape, inputs left alone unless in place); agreed across
    ranks; a wrong one ends the item as harness_error naming it."""
    c, job, size = run.c, run.job, run.size
    if not job.baselines or not job.timing.enabled:
        return
    phase = f"size {size}, baseline check"
    c.files.heartbeat(phase)
    pristine = c.make_inputs(size, "baselines")
    ref_in = compare.clone(pristine)
    expected = c.call_reference(ref_in, phase)
    found = None
    for name, module in modules(c).items():
        mine = compare.clone(pristine)
        try:
            out = module.solution(*mine)
            c.sync()
        except Exception as e:  # noqa: BLE001 - its peers wait in its collective: end now, as for the reference
            text = f"{type(e).__name__}: {e}"
            c.die(failure(text, c.world), f"the baseline {name} failed ({phase}): {text}", "reference", e)
        category, msg, _ = checks.check_call(out, expected, mine, ref_in, pristine, job.tolerance, job.inplace,
                                             getattr(c.harness, "check", None))
        if category and found is None:
            found = f"the baseline {name} is wrong (the harness's fault, not the candidate's): {msg}"
    everyone = c.agree({"category": Failure.HARNESS_ERROR if found else None, "message": found})
    run.fail_if_any(everyone, phase)


def timing_record(record: dict, measured: dict, names: list[str], lookahead: dict | None) -> None:
    """The size's `timing.baselines` (each one's rounds summarized as the reference's are), `vs`
    (the candidate's paired speedup against each, capped as the main one is where its windows beat
    the lookahead bound), `vs_band` and `best_backend` (the fastest of the reference and the
    baselines by median time)."""
    if not names:
        return
    timing = record["timing"]
    timing["baselines"] = {name: {**summarize(measured["times"][name]), "iters": measured["iters"][name]}
                           for name in names}
    capped = bool(lookahead and lookahead.get("capped") and lookahead.get("bound_s"))
    vs: dict[str, float | None] = {}
    bands: dict[str, list[float] | None] = {}
    for name, t in timing["baselines"].items():
        pair = {"reference": t, "candidate": timing["candidate"]}
        speedup, band = paired_speedup(pair), size_band(pair)
        if capped and lookahead is not None:
            cap = t["median_s"] / lookahead["bound_s"]
            speedup = None if speedup is None else min(speedup, cap)
            band = (min(band[0], cap), min(band[1], cap)) if band else None
        vs[name], bands[name] = speedup, list(band) if band else None
    record["vs"], record["vs_band"] = vs, bands
    medians = {"reference": timing["reference"]["median_s"], **{n: t["median_s"] for n, t in timing["baselines"].items()}}
    record["best_backend"] = min(medians, key=lambda n: medians[n])
