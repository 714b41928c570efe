"""Triton helpers PKB candidates may import from `utils.triton_utils`: thread and block ids, and a
barrier between blocks of the same index on every rank through symmetric-memory signal pads.

The barrier's slots are 32-bit flags: rank r's pad holds world_size flags per block id; a block
sets flag [block_id][my rank] on every peer (spinning until it was 0) and clears its own flags
[block_id][peer] (spinning until each peer set it), so the pad is all zeros again afterwards.
`sem` is "relaxed" (ordering only the flags) or "acq_rel" (release on set, acquire on clear).
"""
import triton
import triton.language as tl


@triton.jit
def get_tid():
    x = tl.inline_asm_elementwise("mov.u32 $0, %tid.x;", "=r", [], dtype=tl.uint32, is_pure=True, pack=1)
    y = tl.inline_asm_elementwise("mov.u32 $0, %tid.y;", "=r", [], dtype=tl.uint32, is_pure=True, pack=1)
    z = tl.inline_asm_elementwise("mov.u32 $0, %tid.z;", "=r", [], dtype=tl.uint32, is_pure=True, pack=1)
    return x, y, z


@triton.jit
def get_ntid():
    x = tl.inline_asm_elementwise("mov.u32 $0, %ntid.x;", "=r", [], dtype=tl.uint32, is_pure=True, pack=1)
    y = tl.inline_asm_elementwise("mov.u32 $0, %ntid.y;", "=r", [], dtype=tl.uint32, is_pure=True, pack=1)
    z = tl.inline_asm_elementwise("mov.u32 $0, %ntid.z;", "=r", [], dtype=tl.uint32, is_pure=True, pack=1)
    return x, y, z


@triton.jit
def get_flat_tid():
    tx, ty, tz = get_tid()
    nx, ny, _ = get_ntid()
    return (tz * ny + ty) * nx + tx


@triton.jit
def get_flat_bid():
    return (tl.program_id(2) * tl.num_programs(1) + tl.program_id(1)) * tl.num_programs(0) + tl.program_id(0)


@triton.jit
def sync_threads():
    tl.inline_asm_elementwise("bar.sync 0;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)


# each flag operation spins on a system-scope compare-and-swap until it sees the expected old value
@triton.jit
def send_signal(addrs, sem: tl.constexpr):
    if sem == "relaxed":
        tl.inline_asm_elementwise(
            "{ .reg .u32 old; .reg .pred done; spin_set_rlx: atom.relaxed.sys.global.cas.b32 old, [$1], 0, 1; "
            "setp.eq.u32 done, old, 0; @!done bra spin_set_rlx; }",
            "=r, l", [addrs], dtype=tl.int32, is_pure=False, pack=1)
    elif sem == "acq_rel":
        tl.inline_asm_elementwise(
            "{ .reg .u32 old; .reg .pred done; spin_set_rel: atom.release.sys.global.cas.b32 old, [$1], 0, 1; "
            "setp.eq.u32 done, old, 0; @!done bra spin_set_rel; }",
            "=r, l", [addrs], dtype=tl.int32, is_pure=False, pack=1)
    else:
        tl.static_assert(False, "sem must be 'relaxed' or 'acq_rel'")


@triton.jit
def wait_signal(addrs, sem: tl.constexpr):
    if sem == "relaxed":
        tl.inline_asm_elementwise(
            "{ .reg .u32 old; .reg .pred done; spin_clr_rlx: atom.relaxed.sys.global.cas.b32 old, [$1], 1, 0; "
            "setp.eq.u32 done, old, 1; @!done bra spin_clr_rlx; }",
            "=r, l", [addrs], dtype=tl.int32, is_pure=False, pack=1)
    elif sem == "acq_rel":
        tl.inline_asm_elementwise(
            "{ .reg .u32 old; .reg .pred done; spin_clr_acq: atom.acquire.sys.global.cas.b32 old, [$1], 1, 0; "
            "setp.eq.u32 done, old, 1; @!done bra spin_clr_acq; }",
            "=r, l", [addrs], dtype=tl.int32, is_pure=False, pack=1)
    else:
        tl.static_assert(False, "sem must be 'relaxed' or 'acq_rel'")


@triton.jit
def blockwise_barrier(signal_pad_ptrs, block_id, rank: tl.constexpr, world_size: tl.constexpr, sem: tl.constexpr):
    """Meet the blocks with index `block_id` (None: this block's flat index) of every rank.
    signal_pad_ptrs: the symmetric-memory handle's signal_pad_ptrs_dev (one uint64 per rank)."""
    if block_id is None:
        block_id = get_flat_bid()
    peers = tl.arange(0, world_size)
    pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
    peer_pads = tl.load(pads + peers).to(tl.pointer_type(tl.uint32))
    own_pad = tl.load(pads + rank).to(tl.pointer_type(tl.uint32))
    slot = block_id * world_size
    if get_flat_tid() < world_size:
        send_signal(peer_pads + slot + rank, sem)
        wait_signal(own_pad + slot + peers, sem)
