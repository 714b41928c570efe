"""A window's outputs described compactly by the candidate process (rank/outputs.py) and turned back
into trees and byte spans by the checker: the same trees as one description per call, and anything
malformed refused (the description comes from candidate-controlled memory)."""
from __future__ import annotations

import pytest
import torch

from pytest_kernelbench.protocol import Done, decode, encode
from pytest_kernelbench.rank import outputs


def _window():
    base = torch.arange(64, dtype=torch.float32)
    return [torch.ones(8), torch.zeros(8), base[::2], (torch.ones(2, 3), 5), torch.ones(8, dtype=torch.bfloat16),
            torch.empty(0), {"a": torch.ones(1)}, None, torch.ones(8)]


def test_every_call_is_described_and_read_back_as_the_same_tree():
    outs = _window()
    entries, layouts = outputs.describe_calls(outs)
    assert len(entries) == len(outs)
    done = decode(encode(Done(outputs=entries, layouts=layouts)))
    trees, spans = outputs.expand(done.outputs, done.layouts)
    assert trees == [outputs.describe(o) for o in outs]
    assert spans == [outputs.output_spans(t) for t in trees]
    assert spans[2] == [(outs[2].data_ptr(), outs[2].data_ptr() + 4 * (31 * 2 + 1))]    # a strided view: first to last element
    assert spans[5] == []                                                          # nothing to read


def test_alike_tensors_share_one_layout():
    outs = [torch.empty(1024) for _ in range(500)]
    entries, layouts = outputs.describe_calls(outs)
    assert len(layouts) == 1 and all(e == [0, o.data_ptr()] for e, o in zip(entries, outs))
    trees, spans = outputs.expand(entries, layouts)
    assert [s[0][1] - s[0][0] for s in spans] == [4096] * 500
    assert len({t["p"] for t in trees}) == 500


@pytest.mark.parametrize("entries, layouts", [
    ([[1, 4096]], [{"t": "T", "s": [4], "st": [1], "d": "float32", "dev": "cpu"}]),      # no such layout
    ([[0, 4096.5]], [{"t": "T", "s": [4], "st": [1], "d": "float32", "dev": "cpu"}]),    # not a pointer
    ([[0, True]], [{"t": "T", "s": [4], "st": [1], "d": "float32", "dev": "cpu"}]),
    ([[0]], [{"t": "T", "s": [4], "st": [1], "d": "float32", "dev": "cpu"}]),
    ([[0, 4096]], [{"t": "T", "s": [4], "st": [1], "d": "float32", "dev": "cpu", "n": 0}]),   # a span claimed
    ([[0, 4096]], [{"t": "T", "s": [-4], "st": [1], "d": "float32", "dev": "cpu"}]),
    ([[0, 4096]], [{"t": "T", "s": ["4"], "st": [1], "d": "float32", "dev": "cpu"}]),
    ([[0, 4096]], [{"t": "T", "s": [4], "st": [1], "d": "no_such_dtype", "dev": "cpu"}]),
    ([[0, 4096]], [{"t": "L", "x": []}]),
    ([{"t": "T", "p": "x", "s": [4], "st": [1], "d": "float32", "dev": "cpu"}], []),  # a tree that cannot be read
    ("outputs", []),
    ([7], []),
])
def test_a_malformed_description_is_refused(entries, layouts):
    with pytest.raises(ValueError):
        outputs.expand(entries, layouts)
