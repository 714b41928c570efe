"""One evaluation worker process (pool.py starts them): an Evaluator serving JSON lines.

stdin: {"id", "problem", "code", "options", "submitted"} per line; the replies go to a private copy
of the original stdout: {"id", "evaluation": {...}} or {"id", "error": "...", "status": 4xx}. File
descriptor 1 itself points at stderr, so nothing else printed in this process (a library's print,
a warning) can be read as a reply. Its own process: a harness bug, a leak or a crash costs one
worker (restarted by the pool), never the service or the trainer.
"""
from __future__ import annotations

import json
import os
import sys


def main() -> int:
    config = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # no PR_SET_PDEATHSIG: it follows the thread that started this process (a pool's thread), not
    # the pool; a pool that died closes stdin, which ends the loop after the evaluation in flight
    from .evaluate import EvaluateError, Evaluator, UnknownProblem
    evaluator = Evaluator(config.get("problems_dir"), config.get("pkb"), config.get("workdir"),
                          config.get("launcher") or "fork")
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            req = json.loads(line)
            try:
                ev = evaluator.evaluate(req["problem"], req["code"], req.get("options") or {}, req["id"],
                                        req.get("submitted"))
                reply = {"id": req["id"], "evaluation": ev.to_dict()}
            except EvaluateError as e:
                reply = {"id": req["id"], "error": str(e), "status": 404 if isinstance(e, UnknownProblem) else 422}
            replies.write(json.dumps(reply, default=str) + "\n")
    finally:
        evaluator.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
