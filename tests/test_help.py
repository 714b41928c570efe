"""`pytest --help` with the plugin installed: it works (argparse %-formats every help text, and
one stray % once broke `pytest -h` for every project in the venv), and it shows every --kb-*
option with its default."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from kbrun import inner_env, plugin_args

from pytest_kernelbench.options import OPTIONS, help_text


def _help() -> str:
    proc = subprocess.run([sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "--help"],
                          capture_output=True, text=True, timeout=120, env=inner_env(COLUMNS="200"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def _blocks(text: str) -> dict[str, str]:
    """--kb-NAME -> its help, whitespace collapsed (argparse wraps long help over lines)."""
    out: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"^  (--kb-[a-z-]+)", line)
        if m:
            current = m.group(1)
            out[current] = line[m.end():]
        elif current and line.startswith("      "):
            out[current] += " " + line.strip()
        else:
            current = None
    return {k: " ".join(v.split()) for k, v in out.items()}


@pytest.mark.e2e
def test_help_shows_every_option_with_its_default():
    blocks = _blocks(_help())
    for name in (o.name for o in OPTIONS):
        assert f"--kb-{name}" in blocks, f"--kb-{name} missing from pytest --help"
        want = help_text(name).rsplit("(default:", 1)[1]
        assert f"(default:{want}" in blocks[f"--kb-{name}"], (name, blocks[f"--kb-{name}"])
    assert "speedup:5%,pass" in blocks["--kb-compare-fail"]    # a literal %, shown once, not %%


def test_every_help_text_survives_argparse_formatting():
    """The same formatting argparse applies, per option, so a new help text with a lone % fails here
    by name rather than as a crash of `pytest -h`."""
    for name in (o.name for o in OPTIONS):
        text = help_text(name).replace("%", "%%")
        assert text % {"default": None, "dest": name, "prog": "pytest"} == help_text(name), name


def test_the_docs_option_table_is_the_options_table():
    from pytest_kernelbench.options import PAGE, TABLE_MARKS, options_markdown
    page = (Path(__file__).resolve().parent.parent / PAGE).read_text()
    assert TABLE_MARKS[0] in page, f"{PAGE} lost its option table markers"
    block = page.split(TABLE_MARKS[0], 1)[1].split(TABLE_MARKS[1], 1)[0].strip()
    assert block == options_markdown(), f"{PAGE}'s option table drifted: run `python -m pytest_kernelbench.options`"


HIDE_RUNTIME_SITE = '''import sys


class _Hidden:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("filelock", "torch"):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)", name=name)
        return None


sys.meta_path.insert(0, _Hidden())
'''


@pytest.mark.e2e
def test_help_works_where_the_runtime_packages_are_missing(tmp_path):
    """An interpreter that sees the plugin's entry point (an egg-info left in a checkout by
    `pip install -e .`, a venv missing a package) must still give `pytest --help`: the plugin loads
    without filelock or torch, which only items need (their import at load once broke every pytest
    run of that interpreter)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HIDE_RUNTIME_SITE)
    env = inner_env(COLUMNS="200")
    env["PYTHONPATH"] = str(site) + ":" + env["PYTHONPATH"]
    proc = subprocess.run([sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "--help"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--kb-model" in proc.stdout
