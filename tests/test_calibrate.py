"""metrics.calibrate: the calibration cache, measured ceilings win, the probe runs without GPUs."""
from __future__ import annotations

import pytest



def test_calibration_is_cached_and_measured_ceilings_win(tmp_path, monkeypatch):
    from pytest_kernelbench.metrics import calibrate
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    machine = {"gpus": [{"name": "NVIDIA H200"}], "gpu_model": "NVIDIA H200", "driver": "580", "torch": "2.11"}
    path = calibrate.cache_path(machine)
    path.parent.mkdir(parents=True)
    path.write_text('{"link_bw": 4.8e11, "hbm_bw": 4.3e12}')
    calls = []
    import subprocess
    monkeypatch.setattr(calibrate.subprocess, "run",
                        lambda *a, **k: (calls.append(a), subprocess.CompletedProcess(a, 1, "", "boom"))[1])
    measured = calibrate.calibrated(machine)
    assert measured["link_bw"] == 4.8e11 and not calls              # cache hit: nothing measured
    c = calibrate.ceilings(machine, measured)
    # the larger figure wins: a probe that fell short of the wires must not lower the roof
    assert c["link_bw"] == 4.8e11 and c["hbm_bw"] == 4.8e12 and c["peak_flops"] == 989e12
    assert "link_bw measured" in c["source"] and "hbm_bw published H200" in c["source"]
    assert "boom" in calibrate.calibrated(machine, force=True)["error"]
    assert len(calls) == 1                                           # --kb-calibrate=force measures again
    assert "NVLink per GPU per direction" in calibrate.table(machine, measured)


@pytest.mark.e2e
def test_calibration_subprocess_runs_without_gpus(tmp_path, monkeypatch):
    from pytest_kernelbench.metrics import calibrate
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    measured = calibrate.calibrated({"gpus": [], "torch": "x"}, force=True)
    assert measured.get("gpus") == 0, measured
