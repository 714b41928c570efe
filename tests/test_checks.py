"""The rank's checks in-process (rank/checks.py): no process group, no job, plain tensors."""
from __future__ import annotations

import sys

import torch
from kbrun import REPO

sys.path.insert(0, str(REPO))
from pytest_kernelbench.rank import checks, compare  # noqa: E402

TOL = {"atol": 1e-5, "rtol": 1e-5}


def ref(x):
    return (x * 2,)


def call(fn, x):
    cand_in, pristine, ref_in = compare.clone(x), compare.clone(x), compare.clone(x)
    out = fn(*cand_in)
    return checks.check_call(out, ref(*ref_in), cand_in, ref_in, pristine, TOL, inplace=False)


def test_a_correct_call_passes():
    assert call(lambda x: (x * 2,), (torch.arange(8.0),)) == (None, None, 0.0)


def test_a_wrong_value_is_a_mismatch_naming_the_position():
    def wrong(x):
        y = x * 2
        y[5] += 1
        return (y,)
    category, msg, err = call(wrong, (torch.arange(8.0),))
    assert category == "mismatch" and "first at [5]" in msg and err == 1.0


def test_a_modified_input_and_an_alias_fail():
    def mutates(x):
        x.add_(1)
        return ((x - 1) * 2,)
    assert "was modified" in call(mutates, (torch.arange(8.0),))[1]

    x = torch.arange(8.0)
    cand_in, ref_in, pristine = (x.clone(),), (x.clone(),), (x.clone(),)
    out = (cand_in[0].view(-1),)                         # "identity" answered with a view of the input
    category, msg, _ = checks.check_call(out, (ref_in[0].clone(),), cand_in, ref_in, pristine, TOL, False)
    assert category == "mismatch" and "shares memory with an input" in msg


def test_the_harness_check_replaces_the_value_comparison():
    def strict(out, expected, inputs, tol):
        raise AssertionError("rows must be sorted")
    category, msg, _ = checks.check_call((torch.ones(2),), (torch.ones(2),), (torch.ones(2),), (torch.ones(2),),
                                         (torch.ones(2),), TOL, False, strict)
    assert (category, msg) == ("mismatch", "rows must be sorted")


def test_a_reused_output_buffer_is_named_as_shared_storage():
    buf = torch.zeros(4)
    assert checks.check_reuse([(buf,)], (buf,), inplace=False).endswith("(return a fresh tensor each call, not a persistent buffer)")
    assert "outputs of different calls share storage" in checks.check_reuse([(buf,)], (buf,), inplace=False)
    assert checks.check_reuse([(torch.zeros(4),)], (torch.zeros(4),), inplace=False) is None


class World:
    """Two timing sets on 'this rank', plus a value standing for the other ranks' contribution."""

    def __init__(self):
        self.sets = [(torch.rand(16),), (torch.rand(16),)]
        self.peer = 1.0

    def reference(self, x):
        return (x * 2 + self.peer,)

    def refill_all(self):
        for s in self.sets:
            s[0].copy_(torch.rand(16))
        self.peer += 1.0

    def refill_some(self):
        self.peer += 1.0          # only the other ranks got new values


def run(world, candidate):
    return checks.after_timing(world.sets, lambda s: candidate(*s), lambda s: world.reference(*s),
                               world.refill_all, world.refill_some, TOL, inplace=False)


def test_an_honest_candidate_passes_the_anti_cache_passes():
    w = World()
    assert run(w, lambda x: (x * 2 + w.peer,)) is None


def test_a_cache_keyed_on_the_pointer_is_stale_after_the_refill():
    w, cache = World(), {}

    def cached(x):
        key = x.data_ptr()
        if key not in cache:
            cache[key] = (x * 2 + w.peer,)
        return tuple(t.clone() for t in cache[key])
    for s in w.sets:
        cached(*s)                    # timing filled the cache
    found = run(w, cached)
    assert found["category"] == "mismatch" and found["message"].startswith("input set 0:")


def test_a_cache_keyed_on_its_own_input_is_stale_when_only_peers_change():
    w, cache = World(), {}

    def memo(x):
        key = hash(x.numpy().tobytes())
        if key not in cache:
            cache[key] = (x * 2 + w.peer,)
        return tuple(t.clone() for t in cache[key])
    found = run(w, memo)
    assert found["category"] == "mismatch" and "(new values on some ranks only)" in found["message"]


def test_one_buffer_returned_by_every_call_is_diagnosed_as_shared_storage():
    w = World()
    buf = torch.empty(16)

    def reuses(x):
        torch.add(x * 2, w.peer, out=buf)
        return (buf,)
    found = run(w, reuses)
    assert found["message"].startswith("calls on the timing input sets:") and "share storage" in found["message"]
