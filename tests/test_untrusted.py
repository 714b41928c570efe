"""What a candidate process says is read within bounds (rank/untrusted.py, protocol.decode, the
readers of rank/memory.py): it never names a category that is not its own, and nothing it
describes (a size, a depth, a pointer) raises inside the checker: every such thing is refused as
the candidate's failure (issue 44, class 4)."""
from __future__ import annotations

import os

import pytest
import torch

from pytest_kernelbench.protocol import (
    CANDIDATE_FAILURES,
    Done,
    Failed,
    Failure,
    Imported,
    SpecError,
    decode,
    encode,
    reported_category,
)
from pytest_kernelbench.rank import memory, outputs, untrusted
from pytest_kernelbench.rank.failures import ItemFailed


# ---- categories ----------------------------------------------------------------------------------
@pytest.mark.parametrize("said", [*Failure, "no_such_word", None, 3, ["harness_error"]])
def test_a_candidate_process_names_only_a_candidate_category(said):
    got = reported_category(said)
    assert got in CANDIDATE_FAILURES
    assert got == (said if said in ("compile_error", "runtime_error", "forbidden_call", "unsafe") else "runtime_error")


def test_a_done_that_says_harness_error_is_the_candidates_runtime_error():
    payload = encode(Done(outputs=[], failed={"category": "harness_error", "message": "not mine", "traceback": "tb"}))
    done = untrusted.done_of(payload)
    assert done.failed == {"category": Failure.RUNTIME_ERROR, "message": "not mine", "traceback": "tb"}


# ---- decoding: depth and types --------------------------------------------------------------------
def test_a_message_nested_200000_deep_is_not_a_message():
    deep = b'{"kind": "Done", "outputs": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    with pytest.raises(SpecError, match="RecursionError"):
        decode(deep)
    with pytest.raises(ItemFailed) as e:
        untrusted.done_of(deep)
    assert e.value.category == Failure.RUNTIME_ERROR and e.value.where == "candidate"


def test_fields_of_the_wrong_type_are_refused_at_decode():
    with pytest.raises(SpecError, match="import_s"):
        decode(b'{"kind": "Imported", "import_s": {"a": 1}}')
    with pytest.raises(SpecError, match="category"):
        decode(b'{"kind": "Failed", "category": ["harness_error"], "message": "m"}')
    with pytest.raises(SpecError, match="failed"):
        decode(b'{"kind": "Done", "outputs": [], "failed": "harness_error"}')
    with pytest.raises(SpecError, match="missing"):
        decode(b'{"kind": "Imported"}')
    assert decode(encode(Imported(1))) == Imported(1)           # an int where a float is declared
    assert decode(encode(Failed("x", "y"))) == Failed("x", "y")


@pytest.mark.parametrize("done, why", [
    (Done(outputs=[{"t": "L", "x": [{"t": "L", "x": []}]}]), None),
    (Done(outputs=[{"t": "V", "v": 0}]), None),
    (Done(outputs=[], threads=[1]), "threads"),
    (Done(outputs=[], state=[["x"]]), "state"),
    (Done(outputs=[], forbidden={"all_reduce": "many"}), "forbidden"),
    (Done(outputs=[], forbidden={"all_reduce": -1}), "forbidden"),
    (Done(outputs=[], lent=[[1, 2]]), "lent"),
    (Done(outputs=[], lent=[[1 << 64, 2, 0]]), "out of bounds"),
    (Done(outputs=[], segments=[[0, 1 << 63, "ab"]]), None),
    (Done(outputs=[], segments=[[8, 1 << 63, "ab"]]), "out of bounds"),
    (Done(outputs=[], stamps=["now"]), "stamps"),
    (Done(outputs=[], inputs=[[1]]), "input set"),
])
def test_each_field_of_a_done_is_checked(done, why):
    if why is None:
        untrusted.done_of(encode(done))
        return
    with pytest.raises(ItemFailed, match=why) as e:
        untrusted.done_of(encode(done))
    assert e.value.category == Failure.RUNTIME_ERROR


def test_a_tree_deeper_than_the_bound_is_refused_without_recursion():
    tree: dict = {"t": "V", "v": 0}
    for _ in range(untrusted.MAX_DEPTH // 2):
        tree = {"t": "L", "x": [tree]}
    untrusted.tree_ok(tree)                    # a node and its list a level: the bound itself
    with pytest.raises(untrusted.Broken):
        untrusted.tree_ok({"t": "L", "x": [tree]})
    with pytest.raises(untrusted.Broken):      # plain lists count too
        untrusted.tree_ok({"t": "V", "v": eval("[" * 200 + "]" * 200)})
    very: dict = {"t": "V", "v": 0}
    for _ in range(50_000):                    # far past Python's recursion limit
        very = {"t": "L", "x": [very]}
    with pytest.raises(untrusted.Broken):
        untrusted.tree_ok(very)


def test_numbers_past_a_float_are_clamped():
    done = untrusted.done_of(encode(Done(outputs=[], stamps=[10**400, 1.0], probe_s=10**400)))
    assert done.stamps == [float("inf"), 1.0] and done.probe_s == float("inf")
    assert untrusted.seconds(10**400) == float("inf")


def test_long_texts_are_cut():
    done = untrusted.done_of(encode(Done(outputs=[], unsafe="u" * 10**6, failed={"category": "unsafe", "message": "m" * 10**6})))
    assert len(done.unsafe) == len(done.failed["message"]) == untrusted.MAX_TEXT
    assert done.failed["category"] == Failure.UNSAFE and done.failed["traceback"] == ""


# ---- pointers and sizes ---------------------------------------------------------------------------
@pytest.fixture
def reader():
    r = memory.ProcReader(os.getpid())
    yield r
    r.close()


@pytest.mark.parametrize("p, n", [(2**64 - 8, 4), (2**63 - 2, 4), (-4096, 4), (0, -1), (4096, memory.MAX_READ_BYTES + 1),
                                  (10**40, 4)])
def test_a_pointer_or_size_out_of_bounds_is_an_unreadable_output(reader, p, n):
    with pytest.raises(memory.MemoryError_):
        reader.read(p, n, "cpu")


def test_a_real_pointer_is_read(reader):
    t = torch.arange(4, dtype=torch.float32)
    assert torch.equal(reader.read(t.data_ptr(), 16, "cpu").view(torch.float32), t)


@pytest.mark.parametrize("tree", [
    {"t": "T", "s": [1], "st": [1], "d": "float32", "dev": "cpu", "p": 2**64 - 8},       # the OverflowError
    {"t": "T", "s": [2**40], "st": [0], "d": "float32", "dev": "cpu", "p": None},         # 4 bytes read, 4 TiB rebuilt
    {"t": "T", "s": [1] * 100, "st": [1] * 100, "d": "float32", "dev": "cpu", "p": None},  # too many dimensions
    {"t": "T", "s": ["1"], "st": [1], "d": "float32", "dev": "cpu", "p": None},
    {"t": "T", "s": [1], "st": [1], "d": "Tensor", "dev": "cpu", "p": None},
    {"t": "S", "i": {"t": "V", "v": 1}, "v": {"t": "V", "v": 1}, "size": "big"},
    {"t": "D", "x": [[["unhashable"], {"t": "V", "v": 1}]]},
    {"t": "V", "v": [[[[1]]]]},
    {"t": "L"},
])
def test_whatever_breaks_reading_a_described_output_is_an_unreadable_output(reader, tree):
    t = torch.ones(4)
    if tree.get("p", 0) is None:
        tree = dict(tree, p=t.data_ptr())
    with pytest.raises(memory.MemoryError_):
        untrusted.read(tree, reader)


@pytest.mark.parametrize("entries, layouts", [
    ([[0, 2**64 - 8]], [{"t": "T", "s": [1], "st": [1], "d": "float32", "dev": "cpu"}]),
    ([[0, -8]], [{"t": "T", "s": [1], "st": [1], "d": "float32", "dev": "cpu"}]),
    ([[0, 8]], [{"t": "T", "s": [1] * 65, "st": [1] * 65, "d": "float32", "dev": "cpu"}]),
    ([[0, 8]], [{"t": "T", "s": [2**62], "st": [2**62], "d": "float32", "dev": "cpu"}]),
    ([{"t": "T", "s": [1], "st": [1], "d": "float32", "dev": "cpu", "p": 2**64 - 8}], []),
])
def test_expand_refuses_pointers_and_sizes_out_of_bounds(entries, layouts):
    with pytest.raises(ValueError):
        outputs.expand(entries, layouts)


class _Driver:
    """A fake CUDA driver: IPC handles open to a mapping of 4096 bytes, whatever size was claimed."""

    def __init__(self):
        self.opened = []

    def ipc_open(self, handle):
        from pytest_kernelbench.rank.cuda import CudaError
        if handle != b"\x01" * 64:
            raise CudaError("cuIpcOpenMemHandle: invalid handle")
        self.opened.append(1 << 40)
        return 1 << 40

    def allocation(self, p):
        return p, 4096

    def ipc_close(self, p):
        pass


def test_a_cuda_allocation_is_read_within_the_size_the_driver_mapped(monkeypatch):
    reader = memory.IpcReader(_Driver(), torch.device("cpu"))
    monkeypatch.setattr(memory, "bytes_tensor", lambda p, n, device: (p, n))
    reader.add([[1 << 30, 1 << 30, "01" * 64]])               # claims 1 GiB: the driver mapped 4 KiB
    assert reader.read((1 << 30) + 4000, 96, "cuda") == ((1 << 40) + 4000, 96)
    with pytest.raises(memory.MemoryError_):
        reader.read((1 << 30) + 4000, 97, "cuda")
    with pytest.raises(memory.MemoryError_):
        reader.read(2**64 - 8, 4, "cuda")
    with pytest.raises(memory.MemoryError_, match="cannot be opened"):
        reader.add([[1 << 31, 4096, "02" * 64]])
    with pytest.raises(memory.MemoryError_, match="cannot be opened"):
        reader.add([[1 << 32, 4096, "not hex"]])


def test_an_empty_cuda_output_reads_as_empty_whatever_its_pointer():
    """A reference or candidate returning x.new_empty(0) (collective/reduce off the root): its data
    pointer is 0, in no allocation; the first W = 2 GPU run failed the self-check there ("an output
    in memory the candidate did not allocate itself")."""
    reader = memory.IpcReader(_Driver(), torch.device("cpu"))
    described = outputs.describe(torch.empty(0, dtype=torch.bfloat16))
    described.update(p=0, dev="cuda")
    out = outputs.read(described, reader)
    assert out.shape == (0,) and out.dtype == torch.bfloat16
    with pytest.raises(memory.MemoryError_):      # a non-empty one there is still refused
        reader.read(0, 2, "cuda")


def test_a_link_reads_what_a_cpu_candidate_described_within_bounds(reader):
    from pytest_kernelbench.rank.link import Link, Window
    link = Link(os.getpid(), None, None)
    link.reader = reader
    t = torch.arange(3, dtype=torch.float32)
    done = untrusted.done_of(encode(Done(outputs=[outputs.describe(t)], segments=[[4096, 4096, "ab"]],
                                         inputs=[outputs.describe([t])])))
    window = Window(0.0, done, 1)
    assert torch.equal(link.read(window, [0])[0], t)        # CUDA segments on a CPU job: ignored
    assert torch.equal(link.read_inputs(window, 0)[0], t)
    with pytest.raises(memory.MemoryError_, match="input sets"):
        link.read_inputs(window, 1)
    window.done.outputs[0] = {"t": "T", "s": [1], "st": [1], "d": "float32", "dev": "cpu", "p": 2**64 - 8}
    link.read_done(window, [0])
    assert window.unreadable and "out of any process's memory" in window.unreadable
