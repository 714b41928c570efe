"""What a run's model calls cost and may still spend: the run's ledger (budget, spend, tokens, a
model's fatal error), shared by xdist workers through a file lock, and an item's cost from its calls."""
from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

from ..protocol import atomic_write

LEDGER = "llm-ledger.json"


class Skipped(Exception):
    """No call may be made for this item (budget spent, the model failed earlier); str() is why."""


class Ledger:
    def __init__(self, run_dir: Path, max_cost: float | None):
        self.path = Path(run_dir) / LEDGER
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.max_cost = max_cost
        from filelock import FileLock  # here, not at import: the plugin loads without its runtime packages
        self.lock = FileLock(str(self.path) + ".lock", timeout=600)

    def read(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {"usd": 0.0, "prompt_tokens": 0, "completion_tokens": 0, "calls": 0, "unpriced_calls": 0,
                    "fatal": {}}

    def _write(self, data: dict):
        atomic_write(self.path, json.dumps(data, indent=1))

    @contextmanager
    def update(self):
        with self.lock:
            data = self.read()
            yield data
            self._write(data)

    def check(self, model: str):
        with self.lock:
            data = self.read()
        fatal = data.get("fatal", {}).get(model)
        if fatal:
            raise Skipped(f"{model} failed earlier in this run ({fatal}); no more calls to it")
        if self.max_cost is not None and data.get("usd", 0.0) >= self.max_cost:
            raise Skipped(f"budget spent: ${data.get('usd', 0.0):.4f} of --kb-max-cost=${self.max_cost:g}")

    def charge(self, usd: float | None, prompt_tokens: int | None, completion_tokens: int | None) -> None:
        with self.update() as data:
            data["calls"] = data.get("calls", 0) + 1
            data["prompt_tokens"] = data.get("prompt_tokens", 0) + (prompt_tokens or 0)
            data["completion_tokens"] = data.get("completion_tokens", 0) + (completion_tokens or 0)
            if usd is None:
                data["unpriced_calls"] = data.get("unpriced_calls", 0) + 1
            else:
                data["usd"] = data.get("usd", 0.0) + usd

    def mark_fatal(self, model: str, what: str):
        with self.update() as data:
            data.setdefault("fatal", {})[model] = what


def cost_of(calls: list[dict]) -> dict:
    """Tokens and USD an item's calls cost in this run (cache hits cost nothing now; their
    original cost is kept apart)."""
    fresh = [c for c in calls if c and not c.get("cached")]
    cached = [c for c in calls if c and c.get("cached")]
    usd = [c.get("usd") for c in fresh]
    return {
        "calls": len(fresh), "cached_calls": len(cached),
        "prompt_tokens": sum(c.get("prompt_tokens") or 0 for c in fresh),
        "completion_tokens": sum(c.get("completion_tokens") or 0 for c in fresh),
        "usd": sum(u for u in usd if u is not None),
        "usd_known": all(u is not None for u in usd),
        "cached_usd": sum(c.get("usd") or 0.0 for c in cached),
    }
