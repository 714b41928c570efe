"""The checkers' TCPStore (rank/stores.py) is reachable by any local process that finds its port.
What the checkers keep there lives under a prefix derived from the job's key (which no candidate
process holds), and the solver groups' addresses they publish there are sealed with that key: a
process that knows only the port (and the job's token, which candidates see) neither reads them
under their names nor makes a checker take a forged one."""
from __future__ import annotations

import datetime

import pytest

from pytest_kernelbench.rank import stores

torch_dist = pytest.importorskip("torch.distributed")
KEY, TOKEN = "k" * 64, "tok"
NAME = f"kb/{TOKEN}/reference-store"


@pytest.fixture
def checkers_store(tmp_path, monkeypatch):
    monkeypatch.setenv("KB_RENDEZVOUS", str(tmp_path / "rendezvous"))
    timeout = datetime.timedelta(seconds=5)
    raw = stores.open_store(0, 1, timeout)
    view = stores.private(raw, KEY)
    view.set(NAME, stores.seal(KEY, NAME, "127.0.0.1 4242"))
    outsider = torch_dist.TCPStore("127.0.0.1", raw.port, 1, False, timeout=timeout)
    return view, outsider


def test_an_outsider_cannot_read_the_checkers_keys_by_name(checkers_store):
    _, outsider = checkers_store
    assert not outsider.check([NAME])


def test_an_outsider_cannot_plant_a_key_the_checkers_read(checkers_store):
    view, outsider = checkers_store
    outsider.set(f"kb/{TOKEN}/candidate-store", "127.0.0.1 6666")
    assert not view.check([f"kb/{TOKEN}/candidate-store"])


def test_a_forged_address_is_refused_even_under_the_right_name(checkers_store):
    """torch's list_keys() shows an outsider the prefix; a value it writes there is still not sealed."""
    view, outsider = checkers_store
    listed = [k for k in getattr(outsider, "list_keys", lambda: [])() if k.endswith(NAME)]
    for k in listed:
        outsider.set(k, "127.0.0.1 6666")
    got = view.get(NAME).decode()
    assert stores.unseal(KEY, NAME, got) in (None, "127.0.0.1 4242")
    assert stores.unseal(KEY, NAME, stores.seal(KEY, NAME, "127.0.0.1 4242")) == "127.0.0.1 4242"
    assert stores.unseal(KEY, NAME, "127.0.0.1 6666 " + "0" * 64) is None
    assert stores.unseal("other", NAME, stores.seal(KEY, NAME, "127.0.0.1 4242")) is None
