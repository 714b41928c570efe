"""`kernelbench plots`: per item, latency and busbw over size (cli/sizeplots.py), PNGs at least
1000 px wide as the board's; an item without bytes per size is left out with the reason."""
from __future__ import annotations

import cli_synth as synth
import pytest

from pytest_kernelbench.cli import main

pytest.importorskip("matplotlib")


def test_plots_per_item_png(tmp_path, capsys):
    from PIL import Image
    rec = synth.record("collective/all_reduce", "passed", [1.2, 1.1, 1.0, 0.9], collective="all_reduce")
    bare = synth.record("p2p/ring_exchange", "passed", [1.0])        # no scale: no bytes per size
    report = synth.write(tmp_path / "r.json", [rec, bare], synth.H200, {})
    out = tmp_path / "png"
    assert main.main(["plots", str(report), "--png", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["sizes-collective-all-reduce-w4.png"]
    with Image.open(out / "sizes-collective-all-reduce-w4.png") as im:
        assert im.width >= 1000
    err = capsys.readouterr().err
    assert "no sizes-p2p-ring-exchange-w4.png: no bytes per size" in err


def test_plots_with_nothing_to_draw_is_a_usage_error(tmp_path):
    report = synth.write(tmp_path / "r.json", [synth.record("p2p/ring_exchange", "passed", [1.0])], synth.H200, {})
    assert main.main(["plots", str(report), "--png", str(tmp_path / "png")]) == 2
