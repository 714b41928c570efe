"""The leaderboard's page and plots: a self-contained HTML file (tables, PNGs inlined, nothing
fetched), small PNGs, a clear line without matplotlib, and the page as headless Chromium renders
it (Debian's chromium, installed here once when missing; the test skips with the reason if it
cannot be)."""
from __future__ import annotations

import os
import re
from html import escape
import shutil
import subprocess
import sys

import pytest

import cli_synth as synth
from pytest_kernelbench.cli import main, plots

TAB_BLUE = (31, 119, 180)       # matplotlib's first colour: the bars of the first entry


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runs")
    return [str(p) for p in (synth.model_a(tmp), synth.model_b(tmp), synth.cpu_reference(tmp))]


@pytest.fixture(scope="module")
def page(runs, tmp_path_factory):
    pytest.importorskip("matplotlib")
    out = tmp_path_factory.mktemp("page")
    assert main.main(["leaderboard", *runs, "--html", str(out / "index.html"), "--png", str(out / "png")]) == 0
    return out


@pytest.fixture(scope="session")
def chromium():
    """Debian's chromium, installed once when missing (root with apt-get only)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("no chromium, and no root apt-get to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        known = subprocess.run(["apt-cache", "policy", "chromium"], capture_output=True, text=True, timeout=60)
        if "Candidate: (none)" in known.stdout or not known.stdout.strip():
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=300, env=env)
        proc = subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], capture_output=True, text=True,
                              timeout=600, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"chromium could not be installed: {e}")
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip(f"chromium could not be installed: {(proc.stderr or proc.stdout).strip()[-300:]}")
    return found


def test_page_is_self_contained_with_the_tables_and_plots(page):
    html = (page / "index.html").read_text()
    assert '<table id="leaderboard">' in html and "prov/model-b" in html and "cpu: not a speed" in html
    for key in ("speed", "category", "parallelism", "difficulty", "libraries", "rounds"):
        assert f'<table id="{key}">' in html
    assert html.count('src="data:image/png;base64,') == 5
    assert "<script" not in html and not re.search(r'(src|href)="(https?:)?//', html)


def test_png_folder_holds_the_five_small_plots(page):
    pngs = sorted(p.name for p in (page / "png").iterdir())
    assert pngs == ["category.png", "difficulty.png", "refinement.png", "roofline.png", "speedup_tiers.png"]
    for p in (page / "png").iterdir():
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 60_000, (p.name, len(data))


def test_without_matplotlib_png_is_one_line_and_html_keeps_the_tables(runs, tmp_path):
    def run(*args):
        code = ("import sys; sys.modules['matplotlib'] = None; from pytest_kernelbench.cli.main import main; "
                f"sys.exit(main({['leaderboard', *runs, *args]!r}))")
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=synth.env(),
                              timeout=60)
    png = run("--png", str(tmp_path / "png"))
    assert png.returncode == 2 and png.stderr.strip() == f"kernelbench leaderboard: {plots.MISSING}"
    html = run("--html", str(tmp_path / "index.html"))
    assert html.returncode == 0 and plots.MISSING in html.stderr
    text = (tmp_path / "index.html").read_text()
    assert '<table id="leaderboard">' in text and escape(plots.MISSING) in text and "data:image/png" not in text


def test_headless_chromium_shows_the_table_and_the_plots(page, chromium, tmp_path):
    from matplotlib import image
    shot = tmp_path / "screenshot.png"
    url = (page / "index.html").as_uri()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars"]
    dom = subprocess.run([chromium, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert '<table id="leaderboard">' in dom.stdout and dom.stdout.count("<img") == 5
    subprocess.run([chromium, *flags, "--window-size=1280,1500", f"--screenshot={shot}", url],
                   capture_output=True, text=True, timeout=120)
    assert shot.is_file(), "chromium wrote no screenshot"
    pixels = (image.imread(str(shot))[..., :3] * 255).round()
    assert pixels.shape[:2] == (1500, 1280)
    dark = (pixels.max(axis=2) < 80)                 # text: the title and the table's cells
    assert dark[:400].sum() > 2000
    blue = (abs(pixels - TAB_BLUE).max(axis=2) <= 12)   # the plots' bars and points
    assert blue[400:].sum() > 2000, "no plot was drawn in the page"
