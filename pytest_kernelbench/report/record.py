"""The product: one item's record (the report schema's item), typed.

Built in one place (session.base_record: the item's identity), then each stage that ends the item
sets what it knows (session.run_item and fill, the pytest face for skips, broken problems, model
rounds and items that died). A dict only at the JSON boundary: `to_dict` for the JSONL line and
the JSON report, `from_dict` for a report read back (old ones included: a key this class does not
know is kept, in order, in `extra`).

A field is in the dict only once it was given (at construction or set later), as the report has
always been: a failed item has no "score" key, a passed one on a GPU has "score" (maybe null).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from ..protocol import Disposition, Failure, Outcome, Tier, disposition_of

# what every record carries from the start (base_record)
IDENTITY = ("nodeid", "problem", "title", "category", "parallelism", "difficulty", "libraries", "sample", "candidate")


@dataclass(eq=False)
class ItemRecord:
    # identity (base_record)
    nodeid: str
    problem: str
    title: str | None = None
    category: str | None = None
    parallelism: list[str] = field(default_factory=list)
    difficulty: str | None = None
    libraries: list[str] = field(default_factory=list)
    sample: int | None = None
    candidate: dict | None = None               # Candidate.record()
    family: str | None = None                   # metrics: family weights
    unscored: str | None = None                 # metrics: why its speed stays out of the aggregates
    # where and how it ended
    device: str | None = None
    world_size: int | None = None
    placement: str | None = None                # "shared": W ranks on fewer GPUs (--kb-oversubscribe), never timed
    outcome: Outcome | str | None = None
    failure: Failure | str | None = None
    message: str | None = None
    metric: str | None = None                   # problem.yaml `metric` (time, or a problem's own)
    busbw: str | None = None                    # problem.yaml `busbw`: nccl-tests' collective of busbw_GBps
    baselines: dict | None = None               # --kb-baselines: reference_label, timed {name: label}, left_out {name: why}
    gates: list[str] | None = None              # --kb-min-busbw / --kb-max-latency: what this item missed
    build: dict | None = None                   # native: the build's facts
    gpus: list[int] = field(default_factory=list)
    host: str | None = None                     # the node that ran the item's worker
    slurm_step: str | None = None               # "<job>.<step>": the worker's step, or the item's own (slurm launcher)
    hosts: list[str | None] | None = None       # each rank's node (slurm launcher)
    concurrent_with: list[str] = field(default_factory=list)
    wall_s: float | None = None
    compile_s: float | None = None
    sizes: list[dict] = field(default_factory=list)     # per size, as the rank reported it (then annotated)
    phases_s: dict | None = None
    warnings: list[str] = field(default_factory=list)
    isolation: list[str] | None = None
    cores: dict | None = None                   # rank 0's pinned cores and how they were chosen (rank/cores.py)
    killed_strays: list | None = None
    log_tail: str | None = None
    rank_phases: dict | None = None
    rule: str | None = None                     # failed only by a rule stricter than PKB's (protocol.RULES)
    roofline: dict | None = None
    suspect: bool = False
    speed: str | None = None
    band: list[float] | None = None
    score: float | None = None
    verdict: Tier | str | None = None
    timed_s: float | None = None
    overhead_s: float | None = None
    job_dir: str | None = None
    # a model's candidates: the round, its call, and on the sample's best round the rest
    round: int | None = None
    llm: dict | None = None
    best: bool | None = None
    cost: dict | None = None
    rounds: list[dict] | None = None
    refinement_stopped: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)    # keys of a report this class does not know
    _given: set[str] = field(default_factory=set, init=False, repr=False)
    # an old report's record (no "disposition" key) reads back as it was; readers derive it (protocol.disposition_of)
    _says_disposition: bool = field(default=True, init=False, repr=False)

    def __post_init__(self) -> None:
        self._given.update(IDENTITY)

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if "_given" in self.__dict__:
            self._given.add(name)

    def end(self, outcome: Outcome, failure: Failure | str | None = None, message: str | None = None) -> None:
        """The item ends here: its outcome, failure category (failed or error) and message."""
        self.outcome = outcome
        if failure is not None or outcome in (Outcome.FAILED, Outcome.ERROR):
            self.failure = failure
        self.message = message

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)
               if f.name in self._given and f.name not in ("extra", "_given", "_says_disposition")}
        out.update(self.extra)
        if "outcome" in self._given and self._says_disposition:     # derived, never stored apart: it cannot disagree with the outcome
            out["disposition"] = str(self.disposition)
        return out

    @property
    def disposition(self) -> Disposition:
        return disposition_of(self.outcome)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ItemRecord:
        known = {f.name for f in fields(cls)} - {"extra", "_given", "_says_disposition"}
        given: dict[str, Any] = {k: data.get(k) for k in IDENTITY if k in ("nodeid", "problem") or k in data}
        rec = cls(**given)
        rec._given.intersection_update(data)      # an old record without some identity key stays without it
        rec._says_disposition = "disposition" in data
        for k, v in data.items():
            if k == "disposition":      # derived from the outcome (to_dict writes it again)
                continue
            if k in known and k not in IDENTITY:
                setattr(rec, k, v)
            elif k not in known:
                rec.extra[k] = v
        return rec
