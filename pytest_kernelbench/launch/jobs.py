"""The job folder as the launcher watches it while the ranks run: their heartbeats and phases
(launch puts setup phases on the compile budget; outcome/ names them in its messages)."""
from __future__ import annotations

from pathlib import Path

from ..protocol import SETUP_MARK, JobLayout, heartbeat_text


def _beat(f: Path) -> str | None:
    """A heartbeat file's "<unix time> <phase>"; read again while a write was caught halfway."""
    for _ in range(20):
        try:
            text = heartbeat_text(f.read_bytes())
        except OSError:      # removed between the listing and the read
            return None
        if text is not None:
            return text
    return None


def read_heartbeats(job_dir: Path) -> dict[int, tuple[float, str]]:
    """rank -> (time of its last heartbeat, phase)."""
    beats = {}
    for f in sorted(JobLayout(job_dir).hb.glob("rank*")):
        if f.name[4:].isdigit():
            text = _beat(f)
            if text is None:
                continue
            stamp, _, phase = text.partition(" ")
            try:
                beats[int(f.name[4:])] = (float(stamp), phase)
            except ValueError:
                beats[int(f.name[4:])] = (0.0, text)
    return beats


def read_phases(job_dir: Path) -> dict[int, str]:
    """rank -> the phase of its last heartbeat."""
    return {rank: phase for rank, (_, phase) in read_heartbeats(job_dir).items()}


def setup_phase(phase: str) -> bool:
    """Importing the candidate or its first call of a size: time on the compile budget."""
    return phase.startswith("import candidate") or SETUP_MARK in phase

