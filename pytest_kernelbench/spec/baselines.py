"""Baselines per backend (problem.yaml `baselines`, `reference_label`; --kb-baselines): other
trusted implementations of a problem (torch's symmetric-memory ops, a ring of point-to-point
calls, ...) timed in the same rounds as the reference and the candidate, so that the per-size view
shows "vs NAME" next to the speedup against the reference, which alone scores. Pure functions: no
torch, no pytest; the loader names the file on error.

    reference_label: NCCL                 # what the reference is, as the "best" column names it
    baselines:
      symm_mem_one_shot: {file: baselines/symm_mem_one_shot.py, devices: [cuda], label: symm_mem one-shot}
      ring: {file: baselines/ring.py}     # devices: the problem's (default)

A baseline file is the reference's interface: a module with solution(*inputs), run in the
reference process (trusted, no forbid guard), never in the candidate's.
"""
from __future__ import annotations

from pathlib import Path

from ..options import BASELINE_NAME as NAME
from ..options import BASELINES_ALL as ALL
from ..options import BASELINES_NONE as NONE

DEVICES = ("cpu", "cuda")
KEYS = ("file", "devices", "label")
RESERVED = ("reference", "candidate")      # the two sides every round has


class BaselineError(ValueError):
    """A bad `baselines` or `reference_label` field; str() says what is wrong."""


def parse(data: dict, folder: Path, devices: tuple) -> tuple[dict, str | None]:
    """({name: {"path": Path, "devices": tuple, "label": str}}, reference_label) of a problem.yaml."""
    label = data.get("reference_label")
    if label is not None and (not isinstance(label, str) or not label.strip()):
        raise BaselineError(f"field 'reference_label' must be a short name (e.g. NCCL), got {label!r}")
    declared = data.get("baselines")
    if declared is None:
        return {}, label.strip() if label else None
    if not isinstance(declared, dict) or not declared:
        raise BaselineError("field 'baselines' must be a mapping NAME -> {file: baselines/NAME.py, devices: [...], "
                            f"label: ...}}, got {declared!r}")
    out = {}
    for name, cfg in declared.items():
        where = f"baselines.{name}"
        if not isinstance(name, str) or not NAME.match(name) or name in RESERVED:
            raise BaselineError(f"field 'baselines' has the name {name!r}: a lower-case identifier other than "
                                f"{' and '.join(RESERVED)}")
        if not isinstance(cfg, dict):
            raise BaselineError(f"field '{where}' must be a mapping {{file: ..., devices: [...], label: ...}}, "
                                f"got {cfg!r}")
        unknown = sorted(set(cfg) - set(KEYS))
        if unknown:
            raise BaselineError(f"unknown field '{where}.{unknown[0]}' (known: {', '.join(KEYS)})")
        file = cfg.get("file")
        if not isinstance(file, str) or not file.endswith(".py") or Path(file).is_absolute() or ".." in Path(file).parts:
            raise BaselineError(f"field '{where}.file' must be a .py file inside the problem folder, got {file!r}")
        path = folder / file
        if not path.is_file():
            raise BaselineError(f"field '{where}.file' names {file}, which does not exist")
        devs = cfg.get("devices", list(devices))
        if not isinstance(devs, list) or not devs:
            raise BaselineError(f"field '{where}.devices' must be a non-empty list, got {devs!r}")
        bad = [d for d in devs if d not in DEVICES or d not in devices]
        if bad:
            raise BaselineError(f"field '{where}.devices' has {bad[0]!r}; expected any of the problem's devices "
                                f"({', '.join(devices)})")
        text = cfg.get("label", name)
        if not isinstance(text, str) or not text.strip():
            raise BaselineError(f"field '{where}.label' must be a short name, got {text!r}")
        out[name] = {"path": path, "devices": tuple(devs), "label": text.strip()}
    return out, label.strip() if label else None


def select(declared: dict, wanted: str | tuple[str, ...], device: str, timed: bool) -> tuple[dict, dict]:
    """(the baselines this item times, {name: path}; those left out, {name: why}); `wanted`:
    options.parse_baselines's. Only what the problem declares is ever timed."""
    run: dict[str, str] = {}
    left: dict[str, str] = {}
    for name, cfg in declared.items():
        if wanted == NONE or (wanted != ALL and name not in wanted):
            left[name] = "not asked for (--kb-baselines=all or a list of names times it)"
        elif not timed:
            left[name] = "timing is off"
        elif device not in cfg["devices"]:
            left[name] = f"runs on {', '.join(cfg['devices'])} only, not {device}"
        else:
            run[name] = str(Path(cfg["path"]).resolve())
    return run, left


def item_record(declared: dict, reference_label: str | None, run: dict, left: dict, device: str) -> dict | None:
    """The item's `baselines` entry: the reference's label (problem.yaml's names its GPU backend: on
    CPU the reference's collectives are gloo's), the labels of those timed, and why the others were
    not (None where the problem declares none)."""
    if not declared:
        return None
    return {"reference_label": (reference_label if device == "cuda" else None) or "reference",
            "timed": {name: declared[name]["label"] for name in run},
            "left_out": dict(left)}
