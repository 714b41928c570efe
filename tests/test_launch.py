"""launch: the rank log cap keeps a log's head."""
from __future__ import annotations

from pytest_kernelbench import launch


def test_log_cap_truncates_but_keeps_head(tmp_path):
    (tmp_path / "logs").mkdir()
    log = tmp_path / "logs" / "rank0.log"
    log.write_bytes(b"first line\n" + b"x" * 5000)
    assert launch.cap_logs(tmp_path, limit=1000) == ["rank0.log"]
    assert log.stat().st_size == 0 and (tmp_path / "logs" / "rank0.head").read_bytes().startswith(b"first line")
