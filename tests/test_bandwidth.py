"""spec.bandwidth: nccl-tests' algbw and busbw (doc/PERFORMANCE.md of NVIDIA/nccl-tests), the
problem.yaml declaration (busbw, scale) checked with errors naming the file and the field, and the
collectives that declare it."""
from __future__ import annotations

import pytest
from kbrun import PROBLEMS, make_tree

from pytest_kernelbench.spec import bandwidth
from pytest_kernelbench.spec.problem import ProblemError, load_problem


# nccl-tests' PERFORMANCE.md, "Summary", written out per collective and world size
def published(collective: str, n: int) -> float:
    return {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n, "all_gather": (n - 1) / n,
            "all_to_all": (n - 1) / n, "broadcast": 1.0, "reduce": 1.0}[collective]


@pytest.mark.parametrize("collective", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce"])
@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_factor_is_nccl_tests_formula(collective, n):
    assert bandwidth.factor(collective, n) == pytest.approx(published(collective, n))


def test_algbw_and_busbw_match_a_worked_example():
    # 256 MiB all-reduce over 8 ranks in 1.5 ms: algbw = S/t, busbw = algbw * 2*7/8
    S, t = 268435456, 1.5e-3
    assert bandwidth.algbw(S, t) == pytest.approx(S / t / 1e9)
    assert bandwidth.busbw(S, t, "all_reduce", 8) == pytest.approx(S / t / 1e9 * 1.75)
    assert bandwidth.busbw(S, t, "broadcast", 8) == pytest.approx(bandwidth.algbw(S, t))
    assert bandwidth.busbw(S, t, "none", 8) == pytest.approx(bandwidth.algbw(S, t))


def test_all_gather_size_is_the_gathered_array():
    # nccl-tests: S = sendcount * sizeof(type) * n for all_gather; reduce_scatter's n counts the whole input
    gather = bandwidth.Scale("n", 2, world=True)
    assert gather.size_bytes({"n": 4096}, 4) == 4096 * 2 * 4
    assert bandwidth.Scale("n", 2).size_bytes({"n": 4096}, 4) == 4096 * 2
    assert bandwidth.Scale("n", 2).size_bytes({"m": 1}, 4) is None


@pytest.mark.parametrize("patch, message", [
    ({"busbw": "allreduce"}, "field 'busbw' is 'allreduce'; expected one of all_reduce"),
    ({"busbw": "all_reduce", "scale": None}, "field 'busbw' needs 'scale"),
    ({"busbw": "all_reduce", "scale": {"field": "m"}}, "field 'scale.field' is 'm', but 'sizes.tiny.m'"),
    ({"busbw": "all_reduce", "scale": {"field": "n", "element_bytes": 0}}, "field 'scale.element_bytes'"),
    ({"busbw": "all_reduce", "scale": {"field": "n", "world": "yes"}}, "field 'scale.world'"),
    ({"busbw": "all_reduce", "scale": {"field": "n", "multiple": 0}}, "field 'scale.multiple'"),
    ({"busbw": "all_reduce", "scale": {"field": "n", "stride": 2}}, "unknown field 'scale.stride'"),
    ({"scale": "n"}, "field 'scale' must be a mapping"),
])
def test_bad_declaration_is_a_collection_error_naming_file_and_field(tmp_path, patch, message):
    problems, _ = make_tree(tmp_path, {"p": ""}, yaml_patch=patch)
    path = problems / "collective" / "p" / "problem.yaml"
    if patch.get("scale", 0) is None:     # drop it: the copy of all_reduce declares one
        import yaml
        data = yaml.safe_load(path.read_text())
        data.pop("scale")
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ProblemError) as e:
        load_problem(path, problems)
    assert message in str(e.value) and "problem.yaml" in str(e.value)


def test_the_nccl_collectives_declare_their_factor():
    want = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
            "all_to_all": "all_to_all", "broadcast": "broadcast", "reduce": "reduce",
            "ipc_one_shot_allreduce": "all_reduce", "ipc_allgather_peer_store": "all_gather"}
    for name, collective in want.items():
        p = load_problem(PROBLEMS / "collective" / name / "problem.yaml", PROBLEMS)
        assert p.busbw == collective and p.scale is not None and p.scale.field == "n", name
        assert p.scale.world == (collective == "all_gather"), name
    # a problem without the declaration has neither
    p = load_problem(PROBLEMS / "fusion" / "gemm_allreduce" / "problem.yaml", PROBLEMS)
    assert p.busbw is None and p.scale is None
