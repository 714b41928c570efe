"""The checker's heartbeat: written in place (one pwrite a beat), read by the launcher while it is
being written; a record caught halfway is never taken for a phase."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from pytest_kernelbench.launch.jobs import read_heartbeats, read_phases
from pytest_kernelbench.protocol import JobLayout, heartbeat_record, heartbeat_text
from pytest_kernelbench.rank.files import JobFiles


def test_the_latest_phase_reads_back_whole_even_after_a_longer_one(tmp_path):
    files = JobFiles(str(tmp_path), 0, "tok")
    files.heartbeat("size medium, timing round 12/64, candidate " + "x" * 300)
    files.heartbeat("finish")
    assert read_phases(tmp_path) == {0: "finish"}
    (stamp, phase), = read_heartbeats(tmp_path).values()
    assert phase == "finish" and stamp > 0


def test_a_record_caught_halfway_through_a_write_is_refused():
    old, new = heartbeat_record(7, 1.0, "a" * 600), heartbeat_record(8, 2.0, "b" * 10)
    assert heartbeat_text(new) == "2.000 " + "b" * 10
    assert heartbeat_text(new[:300] + old[300:]) is None        # the new head, the old tail
    assert heartbeat_text(old[:300] + new[300:]) is None
    assert heartbeat_text(b"12.5 size tiny, trial 0\n") == "12.5 size tiny, trial 0"    # a plain file


@pytest.mark.e2e
def test_a_reader_beside_a_busy_writer_sees_only_whole_phases(tmp_path):
    writer = textwrap.dedent(f"""
        from pytest_kernelbench.rank.files import JobFiles
        f = JobFiles({str(tmp_path)!r}, 0, "tok")
        for i in range(30000):
            f.heartbeat(f"phase {{i}} " + "y" * (i % 700))
        f.heartbeat("the end")
    """)
    JobFiles(str(tmp_path), 0, "tok").heartbeat("phase start")
    proc = subprocess.Popen([sys.executable, "-c", writer])
    seen = set()
    while proc.poll() is None:
        seen.update(read_phases(tmp_path).values())
    assert proc.wait() == 0
    for phase in seen - {"phase start", "the end"}:
        head, _, tail = phase.partition(" ")[2].partition(" ")
        assert tail == "y" * (int(head) % 700), phase[:80]
    assert len(seen) > 3
    assert read_phases(tmp_path) == {0: "the end"}
    assert JobLayout(tmp_path).heartbeat(0).stat().st_size == 1024
