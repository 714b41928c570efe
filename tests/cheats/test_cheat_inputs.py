"""Red team on CPU (issue 44, class 7). Inputs built on harnesslib.exact_values were every value a
multiple of 1/8 in [-4, 4]: a candidate could send one-byte codes of them (half the bytes of
bfloat16), exact on the benchmark and wrong on the task. The grid's scale is now drawn from the
job's key, and a size's two trials take scales three apart, so a code fixed in advance decodes one
of them wrongly, whatever the draw: mismatch."""
from __future__ import annotations

import pytest
from cheatlib import failed

pytestmark = pytest.mark.e2e      # every test here reads the red team's inner run (tests/e2e_guard.py)

CHEATS = {
    "in_one_byte_codes": """
import torch
import torch.distributed as dist

def solution(x):
    r, w = dist.get_rank(), dist.get_world_size()
    code = (x.float() * 8).round().clamp(-128, 127).to(torch.int8)    # the 1/8 grid: -32 .. 32
    acc = code.to(torch.int32)
    for k in range(1, w):
        buf = torch.empty_like(code)
        ops = [dist.P2POp(dist.isend, code, (r + k) % w), dist.P2POp(dist.irecv, buf, (r - k) % w)]
        for q in dist.batch_isend_irecv(ops):
            q.wait()
        acc += buf.to(torch.int32)
    return (acc.float() / 8).to(x.dtype)
""",
}


def test_one_byte_codes_of_a_fixed_grid_mismatch(judged):
    failed(judged, "in_one_byte_codes", "mismatch")
