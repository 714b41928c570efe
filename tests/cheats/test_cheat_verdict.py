"""Red team of issue 44, classes 4 and 5: the candidate process names its own failure category, kills
its checker with what it describes, or kills the environment watcher that looks at it from outside.
A cheat runs in the candidate process, where the harness's own modules are in sys.modules: it can
write any Done (ControlPage.put_done) or message (Channel.send) it likes.

Before the fix (4eecbbc) each of these ended as it chose: "harness_error" (an error, not the
candidate's failure) for the first four; a pass for the watcher killed with an environ pointer past
2^63 (after which `environ` swapped for 0.3 s to an array with the multicast switch on went
unseen), and a pass for the switch rewritten in place for 50 us. Judged by the one run of
tests/cheats/conftest.py."""
from __future__ import annotations

import pytest
from cheatlib import HONEST, failed

pytestmark = pytest.mark.e2e      # every test here reads the red team's inner run (tests/e2e_guard.py)

# the next Done the candidate process writes is `payload()` instead (once)
FORGE_DONE = '''
import sys
_P = sys.modules["pytest_kernelbench.protocol"]
_CH = sys.modules["pytest_kernelbench.rank.channel"]
def _forge(payload):
    orig = _CH.ControlPage.put_done
    def put_done(self, n, _real):
        _CH.ControlPage.put_done = orig
        orig(self, n, payload)
    _CH.ControlPage.put_done = put_done
'''

# libc's environ and getenv, and an environ array like the given one with the switch on
ENVIRON = '''
import ctypes, time
_libc = ctypes.CDLL(None)
_libc.getenv.restype = ctypes.c_void_p
_SWITCH = b"NCCL_" + b"NV" + b"LS_ENABLE"     # spelled at run time: no text scan sees it
_env = ctypes.c_void_p.in_dll(_libc, "environ")
_ON = ctypes.c_char_p(_SWITCH + b"=1")
def _switched_on(array):
    ptrs = []
    while True:
        p = ctypes.c_void_p.from_address(array + 8 * len(ptrs)).value
        if not p:
            break
        ptrs.append(p)
    out = (ctypes.c_void_p * (len(ptrs) + 1))()
    for i, p in enumerate(ptrs):
        out[i] = ctypes.cast(_ON, ctypes.c_void_p).value if ctypes.string_at(p).startswith(_SWITCH + b"=") else p
    return out
'''

CHEATS = {
    # a Done whose failure is "not the candidate's"
    "v4_done_says_harness_error": HONEST + FORGE_DONE + '''
def solution(x):
    _forge(_P.encode(_P.Done(outputs=[], failed={"category": "harness_error", "message": "KBPROBE not mine"})))
    return x
''',
    # a Failed instead of Imported: the item's failure named by the candidate at import
    "v4_failed_says_harness_error": HONEST + '''
import sys
_P = sys.modules["pytest_kernelbench.protocol"]
_CH = sys.modules["pytest_kernelbench.rank.channel"]
_send = _CH.Channel.send
def _send_failed(self, msg, fds=()):
    if type(msg).__name__ == "Imported":
        msg = _P.Failed("harness_error", "KBPROBE not mine")
    return _send(self, msg, fds)
_CH.Channel.send = _send_failed
def solution(x):
    return _p2p_sum(x)
''',
    # an output described at a pointer near 2^64 (an OverflowError in the checker's pread)
    "v4_pointer_near_2_64": HONEST + FORGE_DONE + '''
def solution(x):
    _forge(_P.encode(_P.Done(outputs=[{"t": "T", "s": [1], "st": [1], "d": "float32", "dev": "cpu",
                                         "p": 2**64 - 8}])))
    return x
''',
    # a Done nested 200,000 deep (a RecursionError in the checker's json)
    "v4_done_nested_deep": HONEST + FORGE_DONE + '''
def solution(x):
    _forge(b'{"kind": "Done", "outputs": ' + b"[" * 200000 + b"]" * 200000 + b"}")
    return x
''',
    # the watcher killed (environ pointed past 2^63 for a moment), then `environ` swapped for 0.3 s to
    # an array whose multicast switch is on, and back before the call returns (once)
    "v5_watcher_killed_then_swap": HONEST + ENVIRON + """
_done = []
def solution(x):
    if _done:
        return _p2p_sum(x)
    _done.append(1)
    saved = _env.value
    _env.value = (1 << 63) + 4096          # nothing here calls getenv meanwhile
    time.sleep(0.3)                        # the watcher samples every 50 ms on CPU
    _env.value = saved
    fake = _switched_on(saved)
    _env.value = ctypes.addressof(fake)
    time.sleep(0.3)
    _env.value = saved
    return _p2p_sum(x)
""",
    # the switch rewritten in place for 50 us (once): sampling every 50 ms sees it about once in a thousand
    "v5_flip_50us": HONEST + ENVIRON + """
_done = []
def solution(x):
    if not _done:
        _done.append(1)
        p = _libc.getenv(_SWITCH)
        if p:
            ctypes.memmove(p, b"1", 1)
            t = time.perf_counter()
            while time.perf_counter() - t < 50e-6:
                pass
            ctypes.memmove(p, b"0", 1)
    return _p2p_sum(x)
""",
}


@pytest.mark.parametrize("name", ["v4_done_says_harness_error", "v4_failed_says_harness_error"])
def test_4_a_candidate_cannot_name_a_failure_that_is_not_its_own(judged, name):
    failed(judged, name, "runtime_error", "KBPROBE not mine")


def test_4_a_pointer_near_2_64_is_the_candidates_failure(judged):
    failed(judged, "v4_pointer_near_2_64", "runtime_error", "broke the protocol")


def test_4_a_done_nested_200000_deep_is_the_candidates_failure(judged):
    failed(judged, "v4_done_nested_deep", "runtime_error", "broke the protocol", "RecursionError")


def test_5_a_watcher_killed_by_its_candidate_fails_the_item(judged):
    failed(judged, "v5_watcher_killed_then_swap", "unsafe", "could not be read")


def test_5_a_switch_flipped_in_place_for_50_us_faults(judged):
    """The guarded strings are read-only and sealed before the candidate runs (rank/sealenv.py):
    the write itself kills the candidate process, whatever the watcher samples. Where the kernel
    has no mseal (< 6.10) they are still read-only: the same fault."""
    failed(judged, "v5_flip_50us", "crash", "SIGSEGV")
