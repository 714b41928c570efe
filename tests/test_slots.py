"""rank.slots: every call of a timed window has input memory of its own, values no earlier round
used, copies that at W > 1 never repeat the job's inputs, and inputs a window wrote caught and
restored before the other side's window."""
from __future__ import annotations

import pytest
import torch

from pytest_kernelbench.protocol import TimingSpec


def _slots(count, fresh, n=8, rank=0, even=True, world=1, seed="job-key"):
    from pytest_kernelbench.rank import memory
    from pytest_kernelbench.rank.slots import Slots
    arena = memory.Arena(0, torch.device("cpu"), count * n * 4)
    lent = [(arena.view(k * n * 4, [n], [1], torch.float32),) for k in range(count)]
    made = iter(range(1, 10 ** 6))
    slots = Slots(lent, [(arena, n * 4 if even else None)], fresh, (torch.full((n,), 0.0),),
                  lambda what: (torch.full((n,), float(next(made))),), lambda: None, torch, rank=rank,
                  world=world, seed=seed)
    return slots, lent


def test_slot_count_keeps_a_size_within_the_set_budget():
    from pytest_kernelbench.rank.slots import slot_count
    spec = TimingSpec(set_budget_bytes=8 << 30, max_sets=64)
    for in_bytes in (4 << 10, 1 << 20, 16 << 20, 256 << 20, 3 << 30):
        n = slot_count(in_bytes, spec)
        assert n >= 1
        if n > 1:       # slots and their pristine copies, and up to max_sets sets the harness made
            assert (2 * n + min(n, 64)) * in_bytes <= 8 << 30, (in_bytes, n)
    assert slot_count(1 << 20, spec) == 4064 and slot_count(256 << 20, spec) == 10


@pytest.mark.parametrize("world", [2, 3, 8])
@pytest.mark.parametrize("even", [True, False])
def test_no_two_calls_of_a_window_meet_the_same_inputs_on_every_rank(world, even):
    # a window holds more calls than fresh sets: a rank's own values repeat, but the job's inputs
    # (every rank's at once) must not, or replaying the answer of the call whose values came back
    # is right (tests/cheats/test_cheat_caching.py, replay_values_in_window)
    fresh, calls = 8, 60
    held = []
    for rank in range(world):
        slots, lent = _slots(count=calls, fresh=fresh, rank=rank, even=even, world=world)
        slots.refill("3", calls)
        mine = [int(x[0][0]) for x in lent]
        assert mine[:fresh] == list(range(1, fresh + 1))                # the sets this rank's harness made
        assert set(mine) == set(range(1, fresh + 1))
        assert [int(p[0][0]) for p in slots.priv] == mine              # the checker knows what each slot holds
        assert all(torch.equal(x[0], torch.full((8,), float(v))) for x, v in zip(lent, mine))
        held.append(mine)
    jobs = list(zip(*held))                 # per call: what every rank's slot holds
    assert len(set(jobs)) == calls, "two calls of a window met the same inputs on every rank"


def test_which_sets_the_copies_hold_comes_from_the_key_and_the_round():
    # the same on every rank of a job (a call's inputs are one job's), unknown to a candidate
    # (drawn from the key), new each round (a pattern learnt in one round says nothing of the next)
    def sets(seed, key, rank=1):
        slots, lent = _slots(count=40, fresh=8, rank=rank, world=2, seed=seed)
        slots.refill(key, 40)
        return list(slots.src)
    assert sets("k1", "0") == sets("k1", "0")
    assert sets("k1", "0") != sets("k2", "0") and sets("k1", "0") != sets("k1", "1")
    assert sets("k1", "0")[:8] == list(range(8))
    slots, _ = _slots(count=40, fresh=8)          # W = 1: plain copies
    slots.refill("0", 40)
    assert slots.src == [k % 8 for k in range(40)]


@pytest.mark.parametrize("even", [True, False])
def test_a_write_to_a_copied_slot_at_w2_is_caught_and_restored_from_the_set_it_copies(even):
    slots, lent = _slots(count=20, fresh=4, rank=1, world=2, even=even)
    slots.refill("1", 20)
    pristine = [x[0].clone() for x in lent]
    assert [int(x[0][0]) for x in lent] == [k + 1 for k in slots.src]
    assert slots.before("candidate", inplace=False)
    lent[6][0][5] = -3.0
    lent[17][0][0] = 7.0
    assert not slots.before("reference", inplace=False)
    assert all(torch.equal(x[0], p) for x, p in zip(lent, pristine))
    slots.refill("2", 20)
    assert slots.before("candidate", inplace=False)
    assert slots.before("reference", inplace=False)      # nothing written: intact


def test_every_call_of_a_window_has_a_slot_of_its_own_with_new_values():
    # a set met twice in a window can be answered by replaying the first answer (a cache keyed on
    # the pointer, forgotten between windows): each call has its own memory, and a round puts values
    # no earlier round used in the first `fresh` slots and copies of those in the rest
    slots, lent = _slots(count=10, fresh=4)
    slots.refill("1", 10)
    first = [float(x[0][0]) for x in lent]
    assert first == [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]
    assert len({x[0].data_ptr() for x in lent}) == 10
    assert [float(p[0][0]) for p in slots.priv] == first       # the checker's copy of what each slot holds
    slots.refill("2", 6)
    assert [float(x[0][0]) for x in lent[:6]] == [5, 6, 7, 8, 5, 6]


def test_inputs_written_by_the_candidate_are_caught_and_restored_before_the_reference_runs():
    slots, lent = _slots(count=6, fresh=6)
    slots.refill("1", 6)
    pristine = [x[0].clone() for x in lent]
    assert slots.before("candidate", inplace=False)
    lent[3][0][2] = 1e9                                  # what a candidate's window could do
    assert not slots.before("reference", inplace=False)  # reported, and undone for the reference
    assert all(torch.equal(x[0], p) for x, p in zip(lent, pristine))
    slots.refill("2", 6)
    pristine = [x[0].clone() for x in lent]
    assert slots.before("reference", inplace=True)
    lent[0][0][0] = -1.0                                 # an in-place reference changes its inputs
    assert slots.before("candidate", inplace=True)       # allowed, and undone for the candidate
    assert torch.equal(lent[0][0], pristine[0])


def test_a_write_to_a_copied_slot_is_caught_and_restored_from_the_fresh_rows_kept():
    # only the first `fresh` slots are kept (the rest are copies of them): a write to a copy is
    # still seen, and every copy is restored from its fresh row
    slots, lent = _slots(count=10, fresh=4)
    assert slots.pristine[0].numel() == 4 * 8 * 4        # bytes of four slots, not ten
    slots.refill("1", 10)
    pristine = [x[0].clone() for x in lent]
    assert slots.before("candidate", inplace=False)
    lent[7][0][5] = -3.0
    lent[9][0][0] = 7.0
    assert not slots.before("reference", inplace=False)
    assert all(torch.equal(x[0], p) for x, p in zip(lent, pristine))


def test_the_second_window_of_every_round_starts_from_pristine_inputs_whoever_went_first():
    # the same compare-and-restore pass before both sides' second windows (a window right after it
    # ran slower, so only the reference paying it read above 1.0 against itself); what a reference
    # wrote to its inputs is undone for the candidate and not blamed on it; a window alone (warm-up,
    # probe) keeps no pristine copy, so no second window may follow it
    slots, lent = _slots(count=6, fresh=6)
    slots.refill("1", 6)
    pristine = [x[0].clone() for x in lent]
    assert slots.before("reference", inplace=False)
    lent[2][0][1] = 5.0
    assert slots.before("candidate", inplace=False)
    assert all(torch.equal(x[0], p) for x, p in zip(lent, pristine))
    slots.refill("2", 6, keep=False)
    slots.before("candidate", inplace=False)
    with pytest.raises(AssertionError, match="no pristine copy"):
        slots.before("reference", inplace=False)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("world", [1, 2])
def test_copies_compares_and_restores_run_on_a_cuda_arena(world):
    # the W > 1 copies are gathers into the arena itself (index_select into its later rows)
    from pytest_kernelbench.rank import memory
    from pytest_kernelbench.rank.cuda import Driver
    from pytest_kernelbench.rank.slots import Slots
    dev = torch.device("cuda", 0)
    n, count, fresh = 1024, 200, 64
    torch.cuda.set_device(dev)
    torch.zeros(1, device=dev)          # the context current, as the checker's is
    arena = memory.Arena(0, dev, count * n * 4, Driver())
    lent = [(arena.view(k * n * 4, [n], [1], torch.float32),) for k in range(count)]
    made = iter(range(1, 10 ** 6))
    jobs = []
    for rank in range(world):
        slots = Slots(lent, [(arena, n * 4)], fresh, (torch.zeros(n, device=dev),),
                      lambda what: (torch.full((n,), float(next(made)), device=dev),), torch.cuda.synchronize, torch,
                      rank=rank, world=world, seed="job-key")
        slots.refill("1", count)
        assert all(torch.equal(x[0], p[0]) for x, p in zip(lent, slots.priv))
        assert slots.before("candidate", inplace=False)
        lent[100][0][3] = -1.0
        assert not slots.before("reference", inplace=False)
        assert all(torch.equal(x[0], p[0]) for x, p in zip(lent, slots.priv))
        jobs.append([int(x[0][0]) - int(lent[0][0][0]) for x in lent])
    assert len(set(zip(*jobs))) == (count if world > 1 else fresh)
