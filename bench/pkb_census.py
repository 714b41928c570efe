"""Census of ParallelKernelBench under this harness on a CPU machine (issue 22).

    python bench/pkb_census.py run --pkb PKB --world W --out RUN.json [--forced]
                               [--solutions DIR --backend cuda|triton|parallelkittens] [-k EXPR]
    python bench/pkb_census.py eligibility FORCED_W2.json FORCED_W4.json [...]
    python bench/pkb_census.py summary --out reports/baselines/<date>-cpu-pkb-census.json RUN.json [...]

`run` is one pytest run of a checkout (-n 1, --kb-device=cpu, the reference as candidate unless
--solutions names a folder of PKB candidates), each item under a deadline and each process under
an address-space cap, so a reference that needs tens of GB (PKB's 68 floors a table at 111M rows)
fails alone instead of taking the shared machine down. --forced puts every reference on gloo
(KB_PKB_CPU=all): the evidence `eligibility` turns into pytest_kernelbench/pkb/eligibility.py (a
reference runs on CPU when it passed at every world size tried; otherwise the census's reason).
`summary` condenses runs into one JSON and a short .md beside it: per reference its outcome at
each W; per folder of published solutions the pairing, each file's route and the counts of
multicast (unsafe) and forbidden calls. Long on a small machine: run it in the background.
A benchmark, not a test; never commit PKB's files (only these summaries).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from pytest_kernelbench.pkb import checkout, static  # noqa: E402

# what a census run changes from the defaults, and why (stated in the summary)
SETTINGS = {
    "deadline_s": 180,           # --kb-timeout and --kb-compile-timeout: longer is "too heavy at tiny"
    "pg_timeout_s": 60,          # the shared 2-core machine lags; a peer waiting 20 s is not a hang here
    "address_space_gb": 3,       # per process (pytest and every rank)
}


def _cap_memory() -> None:
    cap = SETTINGS["address_space_gb"] << 30
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def run(args: argparse.Namespace) -> None:
    out = Path(args.out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    for p in (out, out.with_suffix(".jsonl")):
        p.unlink(missing_ok=True)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="pkb-census-"))
    work.mkdir(parents=True, exist_ok=True)
    deadline = SETTINGS["deadline_s"]
    cmd = [sys.executable, "-m", "pytest", "-p", "pytest_kernelbench.plugin", "-p", "no:cacheprovider", "-q",
           "-n", "1", f"--kb-pkb={args.pkb}", "--kb-device=cpu", f"--kb-nproc={args.world}",
           f"--kb-timeout={deadline}", f"--kb-compile-timeout={deadline}", f"--kb-pg-timeout={SETTINGS['pg_timeout_s']}",
           f"--kb-report={out}", "--kb-calibrate=off"]
    if args.solutions:
        cmd += [f"--kb-solutions={args.solutions}", f"--kb-pkb-backend={args.backend}"]
    else:
        cmd += ["--kb-candidate=reference"]
    if args.k:
        cmd += ["-k", args.k]
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    if args.forced:
        env[checkout.FORCE_CPU] = "all"
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=work, env=env, preexec_fn=_cap_memory, check=False)
    print(f"census run: exit {proc.returncode} after {time.monotonic() - t0:.0f} s; report {out}")
    if out.exists():
        doc = json.loads(out.read_text())
        doc["census"] = {"forced": bool(args.forced), "world": args.world, "solutions": args.solutions,
                         "backend": args.backend if args.solutions else None, "settings": SETTINGS,
                         "wall_s": round(time.monotonic() - t0, 1)}
        out.write_text(json.dumps(doc, indent=1))


# ---- eligibility: forced runs -> pytest_kernelbench/pkb/eligibility.py --------------------------
def _first_line(text: str | None, width: int = 160) -> str:
    line = next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "")
    return line if len(line) <= width else line[:width - 3] + "..."


def _stem(item: dict) -> str:
    return item["problem"].split("/", 1)[1]


# what a failure on gloo means, read off its message (the first that matches names the cause)
CAUSES = (
    (r"can't allocate memory|MemoryError|std::bad_alloc", "too heavy at tiny on gloo: needs more than {gb} GB per rank"),
    (r"ProcessGroupGloo::\w+: invalid tensor size", "NCCL-only shapes: gloo's collective refuses the reference's shapes"),
    (r"not compiled with CUDA|CUDA_HOME|Found no NVIDIA driver", "hard-coded CUDA in the reference"),
    (r"No module named 'triton'", "a Triton kernel in the reference"),
    (r"does not support device type cpu", "CUDA-only torch API in the reference"),
    (r"new_group", "the reference makes new process groups on every call, which gloo does not keep up with"),
)


def why_not(item: dict) -> str:
    """The census's reason an item does not run on gloo, from its record: the cause its message
    shows, else the deadline, else the message."""
    import re
    failure, msg = item.get("failure"), item.get("message") or ""
    detail = re.sub(r"^rank \d+(: size \w+, [^:]+)?: ", "", _first_line(msg, 400))[:110]
    size = re.search(r"tried to allocate (\d+) bytes", msg)
    if size:
        detail = f"an allocation of {int(size.group(1)) / 1e9:.2f} GB failed"
    for pattern, cause in CAUSES:
        if re.search(pattern, msg):
            return f"{cause.format(gb=SETTINGS['address_space_gb'])} ({failure}: {detail})"
    if failure == "timeout":
        return f"too heavy at tiny on gloo: over the census deadline of {SETTINGS['deadline_s']} s"
    return f"fails on gloo ({failure}: {detail})"


def eligibility(args: argparse.Namespace) -> None:
    runs = [json.loads(Path(p).read_text()) for p in args.reports]
    facts = checkout.fingerprint(str(Path(args.pkb).resolve()))
    by_stem: dict[str, dict[int, dict]] = {}
    sizes: dict[str, dict] = {}
    for doc in runs:
        assert doc.get("census", {}).get("forced"), "eligibility reads forced runs (run --forced)"
        for item in doc["items"]:
            w = item.get("world_size") or doc["census"]["world"]
            by_stem.setdefault(_stem(item), {})[w] = item
            tiny = next((s.get("config") for s in item.get("sizes") or [] if s.get("name") == "tiny"), None)
            if tiny:
                sizes[_stem(item)] = tiny
    lines = []
    for stem in sorted(by_stem, key=checkout.stem_key):
        per_w = by_stem[stem]
        bad = {w: why_not(i) for w, i in sorted(per_w.items()) if i.get("outcome") != "passed"}
        if bad:      # the world size whose failure names a cause, else the first
            w = next((w for w, why in bad.items() if not why.startswith(("fails on gloo", "too heavy at tiny on gloo: "
                                                                           "over"))), next(iter(bad)))
            entry = {"reason": f"{bad[w]} [census {Path(args.census_name).stem[:10]}, W={w}]"}
        else:
            entry = {"world_sizes": sorted(per_w)}
            if sizes.get(stem) and sizes[stem] != checkout.SIZES["tiny"]:
                entry["tiny"] = sizes[stem]
        lines.append(f"    {stem!r}: {entry!r},")
    text = f'''"""Which ParallelKernelBench references run on CPU (gloo): the census's evidence. Generated by
bench/pkb_census.py eligibility from forced runs (every reference on gloo, tiny size) of the checkout
below; a reference passed at every world size tried runs on CPU, any other carries the reason.
Do not edit by hand: run the census again."""
from __future__ import annotations

SOURCE = {args.census_name!r}
PKB = {{"commit": {facts["commit"]!r}, "generator_sha256": {facts["generator_sha256"]!r}}}
# stem -> {{"world_sizes": [...], "tiny": {{...}} (when not the default)}} or {{"reason": why not}}
CPU: dict[str, dict] = {{
{chr(10).join(lines)}
}}
'''
    target = REPO / "pytest_kernelbench" / "pkb" / "eligibility.py"
    target.write_text(text)
    ok = sum(1 for ln in lines if "world_sizes" in ln)
    print(f"eligibility: {ok} of {len(lines)} references run on CPU; written to {target}")


# ---- summary: runs -> one JSON and a short .md ---------------------------------------------------
def _route(item: dict) -> str:
    if item.get("outcome") == "passed":
        return "passed"
    if item.get("outcome") == "skipped":
        msg = item.get("message") or ""
        if msg.startswith("needs CUDA:"):
            return "skipped: the candidate needs CUDA"
        if msg.startswith("needs CUDA GPUs"):
            return "skipped: the item is CUDA only"
        return "skipped: " + _first_line(msg, 60)
    rule = f" (rule: {item['rule']})" if item.get("rule") else ""
    return f"{item.get('failure')}{rule}"


def _row(item: dict) -> dict:
    cand = item.get("candidate") or {}
    return {"problem": item["problem"], "world_size": item.get("world_size"), "outcome": item.get("outcome"),
            "failure": item.get("failure"), "rule": item.get("rule"), "route": _route(item),
            "message": _first_line(item.get("message"), 200), "wall_s": item.get("wall_s"),
            "file": cand.get("origin") if cand.get("kind") == "dir" else None, "paired_by": cand.get("paired_by")}


def summary(args: argparse.Namespace) -> None:
    docs = [json.loads(Path(p).read_text()) for p in args.reports]
    refs, models = [], []
    for doc in docs:
        c = doc.get("census") or {}
        pkb = doc["config"].get("pkb") or {}
        if not pkb.get("checkout"):       # a report without PKB facts: the checkout it names, now
            root = Path(doc["config"]["settings"]["pkb"])
            pkb = {**pkb, "checkout": {"name": root.name, **checkout.fingerprint(str(root))}}
        entry = {"world_size": c.get("world"), "forced": c.get("forced"), "pkb": pkb.get("checkout"),
                 "wall_s": c.get("wall_s"), "aggregates": {k: doc["aggregates"].get(k) for k in
                                                          ("total", "passed", "failed", "errors", "skipped")},
                 "items": [_row(i) for i in sorted(doc["items"], key=lambda i: checkout.stem_key(_stem(i)))]}
        if c.get("solutions"):
            folder = Path(c["solutions"])
            entry.update(folder=folder.name, backend=c.get("backend"), pairing=pkb.get("solutions"),
                         static=static_counts(folder), routes=dict(Counter(r["route"] for r in entry["items"])))
            entry["no_code_for_existing_files"] = sum(
                1 for r in entry["items"] if r["failure"] == "no_code" and r["file"] and (folder / Path(r["file"]).name).exists())
            models.append(entry)
        else:
            refs.append(entry)
    out = Path(args.out)
    doc = {"issue": 22, "settings": SETTINGS, "machine": docs[0].get("machine") if docs else None,
           "references": refs, "solutions": models}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    out.with_suffix(".md").write_text(markdown(doc, out.name))
    print(f"summary: {out} and {out.with_suffix('.md')}")


def static_counts(folder: Path) -> dict:
    """Per folder: files, multicast mentions (refused as unsafe) and calls of forbidden APIs found
    in the source (barrier-only files apart: PKB's prompt example calls dist.barrier())."""
    files = sorted(p for p in folder.glob("*.py"))
    unsafe = forbidden = barrier = barrier_only = 0
    by_name: Counter = Counter()
    for f in files:
        text = f.read_text(errors="replace")
        if static.multicast(text):
            unsafe += 1
        calls = static.forbidden_calls(text)
        by_name.update({name: 1 for name in calls})
        if calls:
            forbidden += 1
            barrier += bool(set(calls) & {"barrier", "monitored_barrier"})
            barrier_only += set(calls) <= {"barrier", "monitored_barrier"}
    return {"files": len(files), "unsafe": unsafe, "forbidden_calls": forbidden, "barrier": barrier,
            "barrier_only": barrier_only, "files_by_call": dict(by_name.most_common())}


def markdown(doc: dict, name: str) -> str:
    s = doc["settings"]
    lines = [f"# ParallelKernelBench census on CPU ({name})", "",
             f"Machine: {(doc.get('machine') or {}).get('cpu', 'CPU')}; gloo, tiny size, `-n 1`; deadline "
             f"{s['deadline_s']} s per item (compile budget the same), process-group timeout {s['pg_timeout_s']} s, "
             f"{s['address_space_gb']} GB address space per process. Made by `bench/pkb_census.py`; the full "
             f"per-item rows are in the JSON beside this file.", ""]
    if doc["references"]:
        lines += ["## (a) References", "", "| run | W | PKB | passed | failed | errors | skipped | wall s |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in doc["references"]:
            a = r["aggregates"]
            what = "forced onto gloo" if r["forced"] else "CPU eligibility"
            lines.append(f"| {what} | {r['world_size']} | {(r['pkb'] or {}).get('commit', '?')[:7]} | {a['passed']} | "
                         f"{a['failed']} | {a['errors']} | {a['skipped']} | {r['wall_s']} |")
        skipped: dict[str, str] = {}
        for r in doc["references"]:
            for i in r["items"] if not r["forced"] else ():
                if i["outcome"] == "skipped":
                    why = i["message"].removeprefix("needs CUDA GPUs, found 0 (").rsplit(" [census", 1)[0]
                    skipped.setdefault(i["problem"], why[:170] + ("..." if len(why) > 170 else ""))
        if skipped:
            lines += ["", f"Not run on CPU ({len(skipped)}; skipped in the eligibility runs with the census's reason):",
                      "", "| reference | why |", "|---|---|"]
            lines += [f"| {k} | {v} |" for k, v in sorted(skipped.items(), key=lambda kv: checkout.stem_key(kv[0][4:]))]
        lines.append("")
    if doc["solutions"]:
        lines += ["## (b) Published solutions against the checkout", "",
                  "| folder | backend | PKB, W | files | paired (exact / published layout) | unpaired files | no_code for existing files "
                  "| unsafe (multicast) | files calling forbidden APIs: any / dist.barrier / barrier only | routes |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for m in doc["solutions"]:
            p = m.get("pairing") or {}
            st = m["static"]
            routes = ", ".join(f"{k} {v}" for k, v in sorted(m["routes"].items(), key=lambda kv: -kv[1]))
            lines.append(f"| {m['folder']} | {m['backend']} | {(m['pkb'] or {}).get('commit', '?')[:7]}, {m['world_size']} "
                         f"| {st['files']} | {p.get('paired', '?')} "
                         f"({p.get('exact', '?')} / {p.get('renamed', '?')}) | {len(p.get('unpaired') or [])} | "
                         f"{m['no_code_for_existing_files']} | {st['unsafe']} | {st['forbidden_calls']} / {st['barrier']} / "
                         f"{st['barrier_only']} | {routes} |")
        lines += ["", "`no_code` counts references the folder has no file for (every file that exists paired). "
                  "Other failures:", ""]
        lines += [f"- {m['folder']}: {r['problem']} {r['route']}: {r['message']}" for m in doc["solutions"]
                  for r in m["items"] if r["outcome"] == "failed" and r["failure"] not in ("unsafe", "no_code")] or ["- none"]
        unpaired = {m["folder"]: (m.get("pairing") or {}).get("unpaired") for m in doc["solutions"]}
        notes = [f"- {f}: " + "; ".join(u) for f, u in unpaired.items() if u]
        if notes:
            lines += ["", "Files that pair with no reference of the checkout:", "", *notes]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run")
    r.add_argument("--pkb", required=True)
    r.add_argument("--world", type=int, required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--forced", action="store_true")
    r.add_argument("--solutions")
    r.add_argument("--backend", default="cuda", choices=checkout.BACKENDS)
    r.add_argument("--workdir")
    r.add_argument("-k")
    e = sub.add_parser("eligibility")
    e.add_argument("--pkb", required=True)
    e.add_argument("--census-name", required=True)
    e.add_argument("reports", nargs="+")
    s = sub.add_parser("summary")
    s.add_argument("--out", required=True)
    s.add_argument("reports", nargs="+")
    args = ap.parse_args()
    {"run": run, "eligibility": eligibility, "summary": summary}[args.what](args)


if __name__ == "__main__":
    main()
