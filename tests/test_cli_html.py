"""The leaderboard's page and plots: a self-contained HTML file (tables, PNGs inlined, nothing
fetched), small PNGs, a clear line without matplotlib, legends whole and off the points, no empty
frame (a plot with nothing to show is left out, with why), and the page as headless Chromium
renders it at 1400 px (the committed GPU baselines' page fits the window). The Chromium tests
skip where no chromium is installed (Debian: apt-get install chromium); they install nothing."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from html import escape, unescape
from pathlib import Path

import cli_synth as synth
import pytest
from kbrun import REPO

from pytest_kernelbench.cli import leaderboard, main, plots
from pytest_kernelbench.report import reading as reports

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
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip("no chromium here (Debian: apt-get install chromium)")
    return found


HEADLESS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def headless(chromium: str, tmp_path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    return subprocess.run([chromium, *HEADLESS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=180)


GPU_BASELINES = sorted(str(p.relative_to(REPO)) for p in (REPO / "reports" / "baselines").glob("*.json")
                       if "h200" in p.name or "h100" in p.name)


@pytest.fixture(scope="module")
def gpu_scores():
    """The committed GPU baselines as the board ranks them (the real case: ten rows, long names)."""
    docs = []
    for path in GPU_BASELINES:
        try:
            docs.append(reports.load(REPO / path))
        except reports.ReportError:
            continue                  # calibration and fidelity records lie beside the reports
    docs = [d for d in docs if any(i.get("outcome") in ("passed", "failed", "error") for i in reports.items(d))]
    return leaderboard.ranked(reports.entries(docs))


def _fig(made):
    """A plot function's figure (it also returns why a part was left out)."""
    return made[0] if isinstance(made, tuple) else made


def _inside(inner, outer, slack: float = 1.0) -> bool:
    return (inner.x0 >= outer.x0 - slack and inner.y0 >= outer.y0 - slack and inner.x1 <= outer.x1 + slack
            and inner.y1 <= outer.y1 + slack)


def _legends(fig) -> list:
    return [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]


@pytest.mark.parametrize("key", ["category", "difficulty"])
def test_bar_legends_are_whole_and_beside_the_axes(gpu_scores, runs, key):
    """The category and difficulty bars: four entries (the synthetic runs and one more) and the ten
    rows of the GPU baselines. Each legend lies inside its figure (nothing cut off on either side)
    and overlaps no axes, tick labels included."""
    pytest.importorskip("matplotlib")
    auto = synth.auto_run(Path(runs[0]).parent, "auto.json", {"collective/all_reduce": "shipped:symm_mem",
                                                              "fusion/matmul_reduce_scatter": "self-check"})
    four = leaderboard.ranked(reports.entries([reports.load(p) for p in [*runs, auto]]))
    assert len(four) == 4
    for scores in (four, gpu_scores):
        fig = _fig(plots.by_tag(scores, key))
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        legends = _legends(fig)
        assert legends, "no legend"
        for legend in legends:
            box = legend.get_window_extent(renderer)
            assert _inside(box, fig.bbox), f"legend {box} is cut off by the figure {fig.bbox}"
            for ax in fig.axes:
                assert not box.overlaps(ax.get_tightbbox(renderer)), f"legend {box} covers an axes"


def test_roofline_legend_covers_no_point(gpu_scores):
    pytest.importorskip("matplotlib")
    fig = _fig(plots.roofline(gpu_scores))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    points = [xy for ax in fig.axes for c in ax.collections for xy in c.get_offset_transform().transform(c.get_offsets())]
    assert len(points) > 100
    for legend in _legends(fig):
        box = legend.get_window_extent(renderer)
        assert _inside(box, fig.bbox)
        covered = [xy for xy in points if box.contains(*xy)]
        assert not covered, f"the legend covers {len(covered)} of {len(points)} points"


def test_a_plot_with_nothing_to_show_is_left_out_and_the_page_says_why(tmp_path):
    """On CPU there is no speed and one round: only the pass-rate bars are drawn; the speed panel,
    the tier, round and roofline plots are left out, each with its reason on the page."""
    pytest.importorskip("matplotlib")
    from matplotlib import image
    cpu = synth.cpu_reference(tmp_path)
    assert main.main(["leaderboard", str(cpu), "--png", str(tmp_path / "png"), "--html", str(tmp_path / "i.html")]) == 0
    assert sorted(p.name for p in (tmp_path / "png").iterdir()) == ["category.png", "difficulty.png"]
    height, width = image.imread(str(tmp_path / "png" / "category.png")).shape[:2]
    assert width >= plots.MIN_PX and width < 1.6 * height      # one panel, not two, still 1000 px wide
    text = (tmp_path / "i.html").read_text()
    assert text.count("data:image/png") == 2 and "GM-speedup left out: no entry measured speed" in text
    for stem, why in (("speedup_tiers", "no entry measured speed (cpu: not a speed)"),
                      ("refinement", "every entry ran one refinement round"),
                      ("roofline", "no passed item has a roofline fraction")):
        assert re.search(rf'<li id="left-out-{stem}">[^<]*: {re.escape(why)}', text), stem


@pytest.mark.e2e
def test_board_folder_is_git_ignored():
    """board/ is where the README sends the leaderboard's output."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    proc = subprocess.run(["git", "check-ignore", "-q", "board/index.html"], cwd=REPO)
    assert proc.returncode == 0, "board/ is not git-ignored"


def test_page_is_self_contained_with_the_tables_and_plots(page):
    html = (page / "index.html").read_text()
    assert '<table id="leaderboard">' in html and "prov/model-b" in html and "cpu: not a speed" in html
    for key in ("speed", "category", "parallelism", "difficulty", "libraries", "rounds"):
        assert f'<table id="{key}">' in html
    assert html.count('src="data:image/png;base64,') == 5
    assert "<script" not in html and not re.search(r'(src|href)="(https?:)?//', html)


def test_png_folder_holds_the_five_plots_at_least_1000px_wide_and_small(page):
    """The PNGs were 370 px wide (blurred when the page showed them bigger); now every one is at
    least 1000 px wide, in a 128-colour palette that keeps it small enough to commit and inline."""
    from matplotlib import image
    pngs = sorted(p.name for p in (page / "png").iterdir())
    assert pngs == ["category.png", "difficulty.png", "refinement.png", "roofline.png", "speedup_tiers.png"]
    for p in (page / "png").iterdir():
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 60_000, (p.name, len(data))
        assert image.imread(str(p)).shape[1] >= 1000, p.name


def test_a_0_percent_bar_is_drawn_and_unlike_a_tag_that_did_not_run(tmp_path):
    """A failed group (counted, none passed) had a bar of height 0, which looked like a tag the
    entry never ran. It is now a hatched stub marked 0 (and the legend says so); a tag the entry
    did not run still has no bar."""
    pytest.importorskip("matplotlib")
    one = leaderboard.ranked(reports.entries([reports.load(synth.model_b(tmp_path))]))
    # model-b: collective 1/1, p2p 1/1, fusion 0/1 (mismatch), ep only skipped (no column)
    fig = _fig(plots.by_tag(one, "category"))
    ax = fig.axes[0]
    tags = [t.get_text() for t in ax.get_xticklabels()]
    assert tags == ["collective", "fusion", "p2p"]
    drawn = [p for p in ax.patches if p.get_height() > 0]
    stubs = [p for p in drawn if p.get_gid() == "zero"]
    assert len(stubs) == 1 and stubs[0].get_hatch() and round(stubs[0].get_x() + stubs[0].get_width() / 2) == 1
    assert [t.get_text() for t in ax.texts] == ["0"]
    assert any("none passed" in t.get_text() for legend in _legends(fig) for t in legend.get_texts())
    two = leaderboard.ranked(reports.entries([reports.load(p) for p in (synth.model_b(tmp_path, "b2.json"),
                                                                     synth.cpu_reference(tmp_path))]))
    fig = _fig(plots.by_tag(two, "category"))
    # the CPU run has no fusion item: no bar of its colour there, and still one stub (model-b's)
    assert len([p for p in fig.axes[0].patches if p.get_gid() == "zero"]) == 1


@pytest.mark.e2e
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


@pytest.mark.e2e
def test_headless_chromium_shows_the_table_and_the_plots(page, chromium, tmp_path):
    from matplotlib import image
    shot = tmp_path / "screenshot.png"
    url = (page / "index.html").as_uri()
    dom = headless(chromium, tmp_path, "--dump-dom", url)
    assert '<table id="leaderboard">' in dom.stdout and dom.stdout.count("<img") == 5
    headless(chromium, tmp_path, "--hide-scrollbars", "--window-size=1400,1500", f"--screenshot={shot}", url)
    assert shot.is_file(), "chromium wrote no screenshot"
    pixels = (image.imread(str(shot))[..., :3] * 255).round()
    assert pixels.shape[:2] == (1500, 1400)
    dark = (pixels.max(axis=2) < 80)                 # text: the title and the table's cells
    assert dark[:400].sum() > 2000
    blue = (abs(pixels - TAB_BLUE).max(axis=2) <= 12)   # the plots' bars and points
    assert blue[400:].sum() > 2000, "no plot was drawn in the page"


MEASURE = ("<script>document.title = JSON.stringify({page: document.documentElement.scrollWidth, "
           "scroll: document.scrollingElement.scrollWidth, window: document.documentElement.clientWidth, "
           "right: Array.from(document.querySelectorAll('table, figure'))"
           ".map(e => [e.id, Math.ceil(e.getBoundingClientRect().right)])});</script>")


@pytest.mark.e2e
def test_the_gpu_baselines_page_fits_a_1400px_window(chromium, tmp_path):
    """The committed GPU board's page (eight rows, long names and machines) at 1400 px: no table
    or plot reaches past the window, and the page never scrolls sideways."""
    pytest.importorskip("matplotlib")
    assert main.main(["leaderboard", *(str(REPO / p) for p in committed_sources()), "--html", str(tmp_path / "i.html")]) == 0
    size = _measured(chromium, tmp_path, (tmp_path / "i.html").read_text())
    assert size["page"] <= size["window"] <= 1400 and size["scroll"] <= size["window"], size
    wide = [(key, right) for key, right in size["right"] if right > size["window"]]
    assert not wide, f"past the {size['window']} px window: {wide}"
    assert {key for key, _ in size["right"]} >= {"leaderboard", "speed", "category", "plot-category", "plot-roofline"}


def _measured(chromium: str, tmp_path, page_html: str) -> dict:
    """The page in headless Chromium at a 1400 px window, as its own script measured it."""
    probe = tmp_path / "probe.html"          # a copy that measures itself (the page has no script)
    probe.write_text(page_html.replace("</body>", MEASURE + "</body>"))
    dom = headless(chromium, tmp_path, "--window-size=1400,2000", "--dump-dom", probe.as_uri())
    found = re.search(r"<title>(.*?)</title>", dom.stdout)
    assert found and found.group(1).startswith("{"), dom.stderr[-500:]
    return json.loads(unescape(found.group(1)))


@pytest.mark.e2e
def test_a_board_with_26_families_does_not_scroll_sideways_at_1400px(chromium, runs, tmp_path):
    """The family table of a full run (a column per family, 13 in problems/, names that are one
    long word) scrolled the page sideways at 1400 px. Here 26 families, 8 parallelisms and 10
    libraries with a long model name beside the synthetic runs: the page's scrollingElement is no
    wider than the window, and no table or plot reaches past it."""
    pytest.importorskip("matplotlib")
    wide = synth.wide_run(tmp_path)
    assert main.main(["leaderboard", *runs, str(wide), "--html", str(tmp_path / "i.html")]) == 0
    text = (tmp_path / "i.html").read_text()
    size = _measured(chromium, tmp_path, text)
    assert size["scroll"] <= size["window"] <= 1400, size
    wide_ones = [(key, right) for key, right in size["right"] if right > size["window"]]
    assert not wide_ones, f"past the {size['window']} px window: {wide_ones}"
    assert '<table id="family-3">' in text and '<table id="family-4">' not in text     # 26 tags: 9 + 9 + 8
    assert {key for key, _ in size["right"]} >= {"family", "family-2", "parallelism", "libraries"}


SOURCES = REPO / "reports" / "leaderboard" / "sources.txt"


def committed_sources() -> list[str]:
    return [ln.strip() for ln in SOURCES.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def test_the_committed_gpu_board_is_what_its_sources_make_and_ranks_no_demo(tmp_path, monkeypatch):
    """The board the docs point to was made from a glob of reports/baselines/, which picked up the
    linger cheat's demonstration (dir:linger, 2.5x) and ranked it first. It is made from
    reports/leaderboard/sources.txt now: every listed file is a report, no row is a --kb-solutions
    folder (cheat demos and template smokes run as one), and the committed leaderboard.md is
    exactly what the list makes (regenerate it as the list's header says)."""
    sources = committed_sources()
    assert sources and all((REPO / s).is_file() for s in sources), [s for s in sources if not (REPO / s).is_file()]
    monkeypatch.chdir(REPO)                       # the Reports section names the files as given
    assert main.main(["leaderboard", *sources, "--md", str(tmp_path / "leaderboard.md")]) == 0
    made = (tmp_path / "leaderboard.md").read_text()
    assert "not a kernelbench report" not in made and "no counted item" not in made
    rows = [ln.split("|")[2].strip() for ln in made.split("## Speed")[0].splitlines() if re.match(r"\| (\d+|-) \|", ln)]
    assert rows and not [r for r in rows if r.startswith("dir:")], rows
    assert made == (REPO / "reports" / "leaderboard" / "leaderboard.md").read_text(), \
        "reports/leaderboard/leaderboard.md is not what sources.txt makes: regenerate it (see sources.txt)"


def test_the_committed_screenshot_is_the_gpu_baselines_page_at_1400px():
    from matplotlib import image
    shots = sorted((REPO / "reports" / "baselines").glob("*-leaderboard-gpu-1400px.png"))
    assert shots, "no screenshot of the leaderboard page under reports/baselines/"
    assert image.imread(str(shots[-1])).shape[1] == 1400


def test_a_long_label_is_elided_in_the_middle_keeping_candidate_and_machine():
    """A run of many shipped solutions names them all in its label (164 characters on the shared-GPU
    baseline): its legend, one column wide, passed the figure's edge."""
    long = "shipped (" + ", ".join(f"solution_{k}" for k in range(12)) + ") (1x NVIDIA H100 80GB HBM3, W=2, shared GPU)"
    s = plots.short(long)
    assert len(s) == plots.LABEL_MOST and s.startswith("shipped (solution_0") and s.endswith("W=2, shared GPU)")
    assert plots.short("reference (self-check) (1x NVIDIA H200, W=1)") == "reference (self-check) (1x H200, W=1)"
