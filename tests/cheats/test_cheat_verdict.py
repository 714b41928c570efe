"""Red team of issue 44, classes 4 and 5: the candidate process names its own failure category, kills
its checker with what it describes, or kills the environment watcher that looks at it from outside.
A cheat runs in the candidate process, where the harness's own modules are in sys.modules: it can
write any Done (ControlPage.put_done) or message (Channel.send) it likes.

Before the fix (4eecbbc) each of these ended as it chose: "harness_error" (an error, not the
candidate's failure) for the first four, and a pass for the watcher killed with an environ pointer
past 2^63 (after which a multicast switch flipped for 0.3 s went unseen). Judged by the one run of
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
    # the watcher killed (environ pointed past 2^63 for a moment), then the multicast switch
    # flipped for 0.3 s and restored before the call returns, as c9_getenv_rewrite does (once)
    "v5_watcher_killed_then_flip": HONEST + '''
import ctypes, time
_libc = ctypes.CDLL(None)
_libc.getenv.restype = ctypes.c_void_p
_SWITCH = b"NCCL_" + b"NV" + b"LS_ENABLE"     # spelled at run time: no text scan sees it
_env = ctypes.c_void_p.in_dll(_libc, "environ")
_done = []
def solution(x):
    if _done:
        return _p2p_sum(x)
    _done.append(1)
    p = _libc.getenv(_SWITCH)
    saved = _env.value
    _env.value = (1 << 63) + 4096          # nothing here calls getenv meanwhile
    time.sleep(0.3)                        # the watcher samples every 50 ms on CPU
    _env.value = saved
    if p:
        ctypes.memmove(p, b"1", 1)
        time.sleep(0.3)
        ctypes.memmove(p, b"0", 1)
    return _p2p_sum(x)
''',
}


@pytest.mark.parametrize("name", ["v4_done_says_harness_error", "v4_failed_says_harness_error"])
def test_4_a_candidate_cannot_name_a_failure_that_is_not_its_own(judged, name):
    failed(judged, name, "runtime_error", "KBPROBE not mine")


def test_4_a_pointer_near_2_64_is_the_candidates_failure(judged):
    failed(judged, "v4_pointer_near_2_64", "runtime_error", "broke the protocol")


def test_4_a_done_nested_200000_deep_is_the_candidates_failure(judged):
    failed(judged, "v4_done_nested_deep", "runtime_error", "broke the protocol", "RecursionError")


def test_5_a_watcher_killed_by_its_candidate_fails_the_item(judged):
    failed(judged, "v5_watcher_killed_then_flip", "unsafe")
