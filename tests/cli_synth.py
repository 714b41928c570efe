"""Small synthetic runs for the `kernelbench` command's tests: records shaped like the session's
(per-size speedups and noise bands, item score and band, verdict, rounds, cost), written through
report.write_json and a JSONL beside it, so the command reads what a real run leaves."""
from __future__ import annotations

import json
from pathlib import Path

from pytest_kernelbench import metrics, report

H200 = {"gpu_count": 4, "gpu_model": "NVIDIA H200", "ceilings": {"link_bw": 4.5e11}}
CPU = {"gpu_count": 0, "gpu_model": None, "ceilings": {}}
PROBLEMS = {   # id: (category, difficulty, parallelism, libraries)
    "collective/all_reduce": ("collective", "easy", ["tp", "dp"], ["nccl"]),
    "p2p/ring_exchange": ("p2p", "medium", ["cp"], ["nccl"]),
    "fusion/matmul_reduce_scatter": ("fusion", "hard", ["tp", "sp"], ["nccl", "cublas"]),
    "ep/moe_dispatch": ("ep", "hard", ["ep"], ["nccl"]),
}


def sizes(speedups: list[float], width: float = 0.02, t_ref: float = 1e-3) -> list[dict]:
    """One size per speedup; the band is +-width around it (the paired rounds' spread)."""
    out = []
    for n, s in enumerate(speedups):
        out.append({"name": f"s{n}", "config": {"n": 1024 << n}, "trials": [{"trial": 0, "ok": True}],
                    "timing": {"reference": {"median_s": t_ref, "rounds_s": [t_ref] * 6},
                               # rounds spread +-width around the median (its band: compare per size)
                               "candidate": {"median_s": t_ref / s,
                                             "rounds_s": [t_ref / s * (1 + d * width) for d in (-1, 0, 1, 0, -1, 1)]}},
                    "speedup": s, "band": [s * (1 - width), s * (1 + width)],
                    "roofline": {"reference": 0.3, "candidate": 0.3 * s}})
    return out


def record(problem: str, outcome: str, speedups: list[float] | None = None, *, width: float = 0.02,
           device: str = "cuda", failure: str | None = None, message: str = "", sample=None, rnd=None,
           model: str | None = None, run_id: str = "run", label: str = "self-check",
           collective: str | None = None) -> dict:
    cat, diff, par, libs = PROBLEMS[problem]
    rec = {"nodeid": f"problems/{problem}/problem.yaml::test_problem[{problem}]", "problem": problem,
           "title": problem, "category": cat, "parallelism": par, "difficulty": diff, "libraries": libs,
           "sample": sample, "round": rnd, "device": device, "world_size": 4, "outcome": outcome,
           "failure": failure, "message": message, "run_id": run_id,
           "candidate": {"kind": "llm" if model else "reference", "label": f"llm:{model}" if model else label,
                         "origin": "", "sha256": None, **({"model": model} if model else {})}}
    if outcome == "passed" and device == "cpu":
        rec.update(sizes=sizes([1.0]), score=None, verdict=None, band=None, speed="cpu: not a speed",
                   roofline={"reference": None, "candidate": None})
        for s in rec["sizes"]:
            s.update(speedup=None, band=None, roofline={"reference": None, "candidate": None})
    elif outcome == "passed":
        sz = sizes(speedups or [1.0], width)
        score, band = metrics.item_score(sz), metrics.item_band(sz)
        rec.update(sizes=sz, score=score, band=list(band) if band else None, verdict=metrics.verdict(score, band),
                   roofline={"reference": 0.3, "candidate": 0.3 * score})
    if collective and rec.get("sizes"):
        # the developer's numbers (metrics/devnums.py): S = n bf16 elements, busbw over 4 ranks
        from pytest_kernelbench.metrics import devnums
        from pytest_kernelbench.spec.bandwidth import Scale
        devnums.annotate(rec["sizes"], collective, Scale("n", 2), rec["world_size"])
        rec["busbw"] = collective
    return rec


def sample(problem: str, model: str, k: int | None, rounds: list[dict], usd_per_round: float = 0.01) -> list[dict]:
    """The records a model's sample leaves: one per round, the best marked, carrying the summary
    of every round and the sample's cost (as testcase._run_model does)."""
    for n, r in enumerate(rounds, 1):
        r.update(sample=k, round=n, llm={"model": model, "sample": k or 0, "round": n, "prompt_tokens": 100 * n,
                                         "completion_tokens": 50 * n, "usd": usd_per_round, "cached": False})
        r["candidate"].update(sample=k or 0, round=n)
    passed = [r for r in rounds if r["outcome"] == "passed"]
    best = max(passed, key=lambda r: r.get("score") or 0) if passed else rounds[-1]
    for r in rounds:
        r["best"] = r is best
        r["cost"] = None
    calls = [r for r in rounds if r["outcome"] != "error"]
    best["cost"] = {"calls": len(calls), "cached_calls": 0, "prompt_tokens": 0, "completion_tokens": 0,
                    "usd": usd_per_round * len(calls), "usd_known": True}
    best["rounds"] = [{"round": r["round"], "outcome": r["outcome"], "failure": r.get("failure"),
                       "score": r.get("score")} for r in rounds]
    return rounds


def write(path: Path, records: list[dict], machine: dict, settings: dict) -> Path:
    """The JSON report (write_json keeps each sample's best round) and the JSONL of every record."""
    config = {"run_id": path.stem, "settings": settings, "identity": settings}
    report.write_json(path, machine, config, records)
    path.with_suffix(".jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def model_a(tmp: Path) -> Path:
    """prov/model-a on 4x H200: 3 problems x 2 samples x up to 2 rounds."""
    m = "prov/model-a"
    rec = lambda *a, **k: record(*a, model=m, **k)   # noqa: E731
    recs = (sample("collective/all_reduce", m, 0, [rec("collective/all_reduce", "passed", [2.0, 0.5])])
            + sample("collective/all_reduce", m, 1, [rec("collective/all_reduce", "failed", failure="mismatch",
                                                         message="rank 1 mismatch"),
                                                     rec("collective/all_reduce", "passed", [4.0, 1.0])])
            + sample("p2p/ring_exchange", m, 0, [rec("p2p/ring_exchange", "passed", [0.8, 0.8])])
            + sample("p2p/ring_exchange", m, 1, [rec("p2p/ring_exchange", "failed", failure="timeout"),
                                                 rec("p2p/ring_exchange", "failed", failure="timeout")])
            + sample("fusion/matmul_reduce_scatter", m, 0,
                     [rec("fusion/matmul_reduce_scatter", "failed", failure="compile_error"),
                      rec("fusion/matmul_reduce_scatter", "failed", failure="compile_error")])
            + sample("fusion/matmul_reduce_scatter", m, 1,
                     [rec("fusion/matmul_reduce_scatter", "error", failure="api_error", message="HTTP 500")]))
    return write(tmp / "model-a.json", recs, H200, {"candidate": "auto", "model": m, "samples": 2, "rounds": 2})


def model_b(tmp: Path, name: str = "model-b.json", all_reduce=(1.2, 1.2), width: float = 0.02,
            ring: str = "passed") -> Path:
    """prov/model-b on 4x H200: one sample and round per problem, one problem skipped."""
    m = "prov/model-b"
    recs = (sample("collective/all_reduce", m, None, [record("collective/all_reduce", "passed", list(all_reduce),
                                                             width=width, model=m)], 0.03)
            + sample("p2p/ring_exchange", m, None,
                     [record("p2p/ring_exchange", ring, [1.0, 1.0], model=m,
                             failure={"passed": None, "error": "harness_error"}.get(ring, "mismatch"))], 0.03)
            + sample("fusion/matmul_reduce_scatter", m, None,
                     [record("fusion/matmul_reduce_scatter", "failed", failure="mismatch", model=m)], 0.03)
            + [record("ep/moe_dispatch", "skipped", message="needs 8 CUDA GPUs, found 4", model=m)])
    return write(tmp / name, recs, H200, {"candidate": "auto", "model": m, "samples": 1, "rounds": 1})


def cpu_reference(tmp: Path, name: str = "cpu.json", ring: str = "passed") -> Path:
    recs = [record("collective/all_reduce", "passed", device="cpu"),
            record("p2p/ring_exchange", ring, device="cpu", failure=None if ring == "passed" else "mismatch")]
    return write(tmp / name, recs, CPU, {"candidate": "reference", "model": None})


H100X1 = {"gpu_count": 1, "gpu_model": "NVIDIA H100 80GB HBM3", "ceilings": {"link_bw": 4.5e11}}


def shared(problem: str, outcome: str, **kw) -> dict:
    """A record of an item whose ranks shared one GPU (--kb-oversubscribe), as session.fill leaves
    it: untimed sizes, no score, band, verdict or roofline, the placement and why there is no speed.
    `forged_score` puts a score on it anyway (a report edited by hand: it must still count for nothing)."""
    forged = kw.pop("forged_score", None)
    rec = record(problem, outcome, **kw)
    rec.update(placement="shared", speed="shared GPU: correctness only, no speed", world_size=2)
    if outcome == "passed":
        rec.update(sizes=[{"name": "s0", "config": {"n": 1024}, "trials": [{"trial": 0, "ok": True}]}],
                   score=forged, verdict=metrics.verdict(forged) if forged else None,
                   roofline={"reference": None, "candidate": None})
        rec.pop("band", None)
    return rec


def shared_run(tmp: Path, name: str = "shared.json", ring: str = "passed", forged_score: float | None = None,
               candidate: str = "reference") -> Path:
    """The self-check at W = 2 on one H100 with --kb-oversubscribe: every item shared its GPU."""
    recs = [shared("collective/all_reduce", "passed", forged_score=forged_score),
            shared("p2p/ring_exchange", ring, failure=None if ring == "passed" else "mismatch")]
    return write(tmp / name, recs, H100X1, {"candidate": candidate, "model": None, "oversubscribe": True})


def auto_run(tmp: Path, name: str, labels: dict[str, str], machine: dict = H200) -> Path:
    """A `--kb-candidate=auto` run: each problem's candidate is what auto found for it there
    (`labels`: problem -> "self-check" or "shipped:NAME")."""
    recs = [record(p, "passed", [1.3 if lb.startswith("shipped") else 1.0] * 2, label=lb) for p, lb in labels.items()]
    return write(tmp / name, recs, machine, {"candidate": "auto", "model": None})


def only(path: Path, problems: set[str], name: str) -> Path:
    """A copy of the report at `path` holding only the records of `problems` (a partial rerun)."""
    doc = json.loads(path.read_text())
    doc["items"] = [i for i in doc["items"] if i["problem"] in problems]
    out = path.with_name(name)
    out.write_text(json.dumps(doc))
    return out


def env() -> dict[str, str]:
    """A subprocess's environment: the repo importable, none of the outer pytest's options."""
    import os
    out = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    out["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")])
    return out


PARALLELISMS = ("tp", "sp", "cp", "dp", "fsdp", "ep", "pp", "non_llm")


def wide_run(tmp: Path, name: str = "wide.json", model: str = "prov/a-model-whose-name-runs-long-on-a-board",
             problems: int = 26) -> Path:
    """A full run's breakdowns at their widest: every problem its own family with a long name, all
    eight parallelisms, nine libraries; every fourth item fails (a 0 % family)."""
    recs = []
    for n in range(problems):
        problem = f"collective/variant_{n:02d}_of_a_problem_with_a_long_name"
        PROBLEMS.setdefault(problem, ("collective", ("easy", "medium", "hard")[n % 3], [PARALLELISMS[n % 8]],
                                      ["nccl", f"library_{n % 9}"]))
        failed = n % 4 == 0
        rec = record(problem, "failed" if failed else "passed", [1.0 + n / 10], model=model,
                     failure="mismatch" if failed else None)
        rec["family"] = f"family_of_variants_{n:02d}"
        recs.append(rec)
    return write(tmp / name, recs, H200, {"candidate": "auto", "model": model, "samples": 1, "rounds": 1})
