"""Where an item's wall time goes (issue: a benchmark of the harness itself).

    python bench/harness_bench.py REPORT.json [--md OUT.md]

Per item: wall, launch (torchrun + interpreter + torch import, i.e. wall minus what the ranks
measured), setup (process group, harness, candidate import/compile), correctness, timing, and the
overhead (wall minus the timed GPU work).
"""
import argparse
import json


def rows(doc):
    out = []
    for it in sorted(doc["items"], key=lambda i: i["problem"]):
        if it.get("outcome") not in ("passed", "failed") or not it.get("phases_s"):
            continue
        ph = it["phases_s"]
        setup = (ph.get("init_s") or 0) + (ph.get("import_s") or 0)
        corr = sum(s.get("correctness_s") or 0 for s in it["sizes"])
        timing = sum(s.get("timing_s") or 0 for s in it["sizes"])
        launch = it["wall_s"] - setup - (ph.get("sizes_s") or corr + timing)
        out.append((it["problem"], it["world_size"], it["wall_s"], launch, setup, corr, timing, it.get("timed_s") or 0,
                    it.get("overhead_s") or 0))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("report")
    ap.add_argument("--md")
    args = ap.parse_args()
    doc = json.load(open(args.report))
    head = "| problem | W | wall s | launch s | setup s | correctness s | timing s | timed GPU work s | overhead s |"
    lines = [head, "|" + "---|" * 9]
    for r in rows(doc):
        lines.append(f"| {r[0]} | {r[1]} | " + " | ".join(f"{x:.2f}" for x in r[2:]) + " |")
    text = "\n".join(lines)
    if args.md:
        open(args.md, "w").write(f"Source: {args.report}\n\n{text}\n")
    print(text)


if __name__ == "__main__":
    main()
