"""Red team on CPU. Fake outputs: lazy subclasses, views of the input, wrong values, a shape hard-coded for one size.
Judged by the one run of tests/cheats/conftest.py (all cheat files' candidates together)."""
from __future__ import annotations

import pytest
from cheatlib import HONEST, failed

pytestmark = pytest.mark.e2e      # every test here reads the red team's inner run (tests/e2e_guard.py)

FORGE = """
import json, sys
def _forged(real):
    def put_done(self, n, payload):
        d = json.loads(payload)
        if len(d.get("outputs") or []) > 1 and all(isinstance(e, list) for e in d["outputs"]):
            forge(d)
            payload = json.dumps(d).encode()
        real(self, n, payload)
    return put_done
def _patch():                      # from the caller's frame: the object that writes "done"
    f = sys._getframe(1)
    while f is not None:
        ctrl = getattr(f.f_locals.get("self"), "ctrl", None)
        if ctrl is not None and not hasattr(type(ctrl).put_done, "forged"):
            type(ctrl).put_done = _forged(type(ctrl).put_done)
            type(ctrl).put_done.forged = True
        f = f.f_back
"""

CHEATS = {
    "lazy_subclass": HONEST + """
class Lazy(torch.Tensor):
    @staticmethod
    def __new__(cls, src):
        return torch.Tensor._make_subclass(cls, torch.empty_like(src))
    def __init__(self, src):
        self.src = src
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})
def solution(x):
    return Lazy(x)
""",
    "view_of_input": HONEST + """
def solution(x):
    x.copy_(_p2p_sum(x))           # save an allocation: the answer in the input's memory
    return x.view(-1)
""",
    "uninitialised_buffer": HONEST + """
import gc
def solution(x):
    gc.collect()
    return torch.empty(x.shape, dtype=x.dtype)     # whatever the allocator hands back
""",
    "frame_expected": HONEST + """
import inspect
def solution(x):
    f = inspect.currentframe().f_back
    while f is not None:                           # the harness's own frames: is the answer lying there?
        loc = f.f_locals
        e = loc.get("expected")
        if isinstance(e, torch.Tensor) and e.shape == x.shape:
            return e.clone()
        if "exps" in loc and "sets" in loc and loc["exps"]:
            for s, e in zip(loc["sets"], loc["exps"]):
                if s[0] is x:
                    return e.clone()
        f = f.f_back
    return torch.zeros_like(x)
""",
    "zero_inputs": HONEST + """
def solution(x):
    x.zero_()
    return torch.zeros_like(x)
""",
    # honest in its first calls (the trials), then leaves garbage in the inputs it was lent after
    # each answer: the reference, timed on the same memory next, would run on it
    "tamper_inputs_in_timing": HONEST + """
_n = [0]
def solution(x):
    out = _p2p_sum(x)
    _n[0] += 1
    if _n[0] > 4:
        x.fill_(1e30)
    return out
""",
    "same_data": HONEST + """
def solution(x):
    return x * dist.get_world_size()       # as if every rank held the same data
""",
    "fp8_roundtrip": HONEST + """
def solution(x):
    small = x.to(torch.float8_e4m3fn).to(x.dtype)      # half the bytes on the wire
    return _p2p_sum(small)
""",
    # the candidate process's own description of its outputs, rewritten on its way to the checker
    # (the class that writes it patched through gc): every call said to be where the last one is
    "redirected_descriptions": HONEST + FORGE + """
def forge(d):
    d["outputs"] = [d["outputs"][-1]] * len(d["outputs"])
def solution(x):
    _patch()
    return _p2p_sum(x)
""",
    "malformed_descriptions": HONEST + FORGE + """
def forge(d):
    d["outputs"] = [[len(d["layouts"]) + 7, e[1]] for e in d["outputs"]]
def solution(x):
    _patch()
    return _p2p_sum(x)
""",
}

# a second small size, so that a candidate written for one shape meets another
SIZED_CHEATS = {
    "hardcoded_shape": HONEST + """
N = 4096                     # the size seen while developing
def solution(x):
    return _p2p_sum(x[:N].contiguous())
""",
}


def test_lazy_tensor_subclass_fails(judged):
    failed(judged, "lazy_subclass", "mismatch", "not a torch.Tensor")


def test_view_of_the_input_fails(judged):
    it = failed(judged, "view_of_input", "mismatch")
    assert "modified" in it["message"] or "shares memory" in it["message"]


@pytest.mark.parametrize("name", ["uninitialised_buffer", "frame_expected", "zero_inputs", "same_data", "fp8_roundtrip"])
def test_wrong_values_are_a_mismatch(judged, name):
    failed(judged, name, "mismatch")


def test_inputs_written_during_timing_are_a_mismatch(judged):
    failed(judged, "tamper_inputs_in_timing", "mismatch", "timing")


def test_hardcoded_shape_fails_on_the_other_size(judged):
    it = failed(judged, "hardcoded_shape", "mismatch", "size tiny2", "shape")
    assert it["sizes"][0]["name"] == "tiny" and all(t["ok"] for t in it["sizes"][0]["trials"])


def test_outputs_described_at_one_place_are_shared_storage(judged):
    failed(judged, "redirected_descriptions", "mismatch", "share storage")


def test_outputs_described_wrongly_break_the_protocol(judged):
    failed(judged, "malformed_descriptions", "runtime_error", "broke the protocol", "outputs described wrongly")
