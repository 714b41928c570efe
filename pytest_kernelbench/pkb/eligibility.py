"""Which ParallelKernelBench references run on CPU (gloo), from the census (placeholder until the
first census is written; bench/pkb_census.py --write-eligibility replaces this file)."""
from __future__ import annotations

SOURCE = None
PKB = {"commit": "unknown", "generator_sha256": None}
# stem -> {"world_sizes": [...], "tiny": {"m": M, "n": N}} (passed on gloo) or {"reason": why not}
CPU: dict[str, dict] = {}
