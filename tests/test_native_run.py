"""Native problems end to end on CPU (issue 13): one plugin run over copies of the g++ problems,
each with a candidate from --kb-solutions, covers splice, region check, scan, hidden build, run,
check and timing, and every way a native candidate fails."""
from __future__ import annotations

import json
import shutil

import pytest
import yaml
from kbrun import PROBLEMS, by_problem, run

pytestmark = pytest.mark.e2e      # every test here runs an inner pytest or ranks (tests/e2e_guard.py)

SUM = PROBLEMS / "collective" / "shm_segment_sum"
REDUCE_OK = """  memcpy(y, slots, n * sizeof(float));
  for (int q = 1; q < world; ++q)
    for (int64_t i = 0; i < n; ++i) y[i] += slots[q * stride + i];"""


def regions(body: str) -> str:
    return f"// >>> EDIT reduce\n{body}\n// <<< EDIT reduce\n"


CANDIDATES = {
    # copies of shm_segment_sum: (category, name) -> candidate text
    "ok": regions(REDUCE_OK),
    "wrong": regions(REDUCE_OK.replace("int q = 1", "int q = 2")),      # leaves out rank 1
    "outside": (SUM / "solution.cpp").read_text().replace("#define KB_WAIT_S 20", "#define KB_WAIT_S 99"),
    "header": regions("#include <cstdlib>\n" + REDUCE_OK),
    "system": regions('  system("true");\n' + REDUCE_OK),
    "broken": regions("  y[0] = 0;\n  this is not C++;"),
    "multicast": regions('  const char *op = "multimem.ld_reduce";  (void)op;\n' + REDUCE_OK),   # code, not a comment
}


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    root = tmp_path_factory.mktemp("native")
    problems, solutions = root / "problems", root / "solutions"
    for name, text in CANDIDATES.items():
        shutil.copytree(SUM, problems / "collective" / name)
        (solutions / "collective").mkdir(parents=True, exist_ok=True)
        (solutions / "collective" / f"{name}.cpp").write_text(text)
    # the other CPU problems with their shipped fills, as a directory candidate would give them
    for pid in ("p2p/shm_ring_buffer", "utility/shm_host_barrier"):
        shutil.copytree(PROBLEMS / pid, problems / pid)
        (solutions / pid).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(PROBLEMS / pid / "solution.cpp", solutions / f"{pid}.cpp")
    cache = root / "build-cache"
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "--kb-timing-rounds=6",
                    env={"KB_NATIVE_CACHE": str(cache)})
    assert doc is not None, proc.stdout + proc.stderr
    return {"root": root, "proc": proc, "doc": doc, "items": by_problem(doc), "cache": cache}


def test_correct_fills_pass_and_are_timed(native):
    items = native["items"]
    for pid in ("collective/ok", "p2p/shm_ring_buffer", "utility/shm_host_barrier"):
        it = items[pid]
        assert it["outcome"] == "passed", (pid, it.get("failure"), it.get("message"), it.get("log_tail"))
        assert it["build"]["s"] >= 0 and it["sizes"][0]["timing"]["candidate"]["median_s"] > 0
    assert items["collective/ok"]["build"]["mode"] == "regions"
    assert items["p2p/shm_ring_buffer"]["build"]["mode"] == "file"
    # the problem's own figure of merit, next to the times (a CPU run: no speed, still the numbers)
    assert items["p2p/shm_ring_buffer"]["sizes"][0]["metric"]["unit"] == "GB/s"
    assert items["utility/shm_host_barrier"]["sizes"][0]["metric"]["unit"] == "us"
    assert items["utility/shm_host_barrier"]["metric"] == "latency"


def test_a_wrong_fill_is_a_mismatch(native):
    it = native["items"]["collective/wrong"]
    assert (it["outcome"], it["failure"]) == ("failed", "mismatch"), it.get("message")


def test_an_edit_outside_a_region_fails_naming_the_line(native):
    it = native["items"]["collective/outside"]
    line = next(i for i, ln in enumerate((SUM / "template.cpp").read_text().splitlines(), 1) if "KB_WAIT_S 20" in ln)
    assert it["failure"] == "edit_outside_region"
    assert f"line {line} of your file differs from template.cpp:{line}" in it["message"]
    assert "KB_WAIT_S 99" in it["message"] and it.get("job_dir") is None      # never launched


@pytest.mark.parametrize("name, what", [("header", "#include of header 'cstdlib'"), ("system", "system() is not allowed")])
def test_reaching_outside_fails_with_its_category(native, name, what):
    it = native["items"][f"collective/{name}"]
    assert (it["outcome"], it["failure"]) == ("failed", "forbidden_construct")
    assert "region 'reduce' line " in it["message"] and what in it["message"]


def test_a_compile_error_points_at_the_region_line(native):
    it = native["items"]["collective/broken"]
    assert it["failure"] == "compile_error"
    assert "template.cpp[EDIT reduce]:2" in it["message"] and "error" in it["message"]
    assert str(native["cache"]) not in it["message"]


def test_multicast_text_is_refused_before_the_build(native):
    it = native["items"]["collective/multicast"]
    assert it["failure"] == "unsafe" and "multimem" in it["message"] and not it.get("build")


def test_builds_are_cached_per_source_and_the_report_validates(native):
    # one folder per distinct built source (ok, wrong, broken, ring, barrier, and shm_segment_sum's
    # own fill, built once for the symbol allowance), each with its build.json
    built = [json.loads(p.read_text()) for p in native["cache"].glob("*/*/build.json")]
    assert len(built) == 6 and sum(1 for b in built if b["ok"]) == 5
    import jsonschema
    from kbrun import REPO
    schema = json.loads((REPO / "pytest_kernelbench" / "schemas" / "report.schema.json").read_text())
    jsonschema.validate(native["doc"], schema)
    agg = native["doc"]["aggregates"]
    assert agg["failures"] == {"mismatch": 1, "edit_outside_region": 1, "forbidden_construct": 2,
                               "compile_error": 1, "unsafe": 1}


def test_problem_yaml_of_the_copies_still_validates(native):
    import jsonschema
    from kbrun import REPO
    schema = json.loads((REPO / "pytest_kernelbench" / "schemas" / "problem.schema.json").read_text())
    for y in (native["root"] / "problems").glob("*/*/problem.yaml"):
        jsonschema.validate(yaml.safe_load(y.read_text()), schema)
