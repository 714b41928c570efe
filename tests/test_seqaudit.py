"""rank/seqaudit.py on one gloo group (W = 1, in this process): a step no call explains is found,
an explained one is not, a number that goes backwards is tampering (issue 44, class 6)."""
from __future__ import annotations

import datetime

import pytest
import torch
import torch.distributed as dist

from pytest_kernelbench.rank.seqaudit import LABEL, TAMPER_LABEL, SequenceAudit


@pytest.fixture
def gloo(tmp_path):
    store = dist.FileStore(str(tmp_path / "store"), 1)
    return dist.ProcessGroupGloo(store, 0, 1, datetime.timedelta(seconds=30))


def test_unexplained_steps_are_found_and_explained_ones_are_not(gloo):
    audit = SequenceAudit.start()
    assert audit is not None
    audit.constructed(gloo)          # made outside the registry: watched from its construction
    audit.rebase()
    assert audit.findings() == {}
    gloo.allreduce([torch.ones(4)]).wait()                  # as from C++: no wrapper saw it
    assert audit.findings() == {LABEL.format(1): 1}
    gloo.allreduce([torch.ones(4)]).wait()
    audit.saw(gloo, "collective")                           # what a wrapper reports after the call
    assert audit.findings() == {}


def test_point_to_point_steps_by_backend(gloo):
    audit = SequenceAudit.start()
    assert audit is not None
    audit.saw(gloo, "p2p")
    assert audit.explained == 1               # gloo counts every operation
    audit.names[id(gloo)] = (gloo, "nccl")    # NCCL's number counts collectives and coalesced blocks only
    audit.saw(gloo, "p2p")
    audit.saw(gloo, "coalesce")
    assert audit.explained == 2


def test_a_number_that_goes_backwards_is_tampering(gloo):
    audit = SequenceAudit.start()
    assert audit is not None
    audit.constructed(gloo)
    gloo.allreduce([torch.ones(4)]).wait()
    audit.rebase()
    audit.base = {k: v + 5 for k, v in audit.base.items()}     # as if the counter had been reset below it
    assert TAMPER_LABEL in audit.findings()
