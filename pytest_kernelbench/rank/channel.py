"""The checker <-> candidate-process link: typed messages (protocol.encode/decode) framed on a
socketpair, with file descriptors passed alongside (a CPU arena's memfd), and a shared control
page for the timed part of a batch.

The control page: "go" and "done" counters and the batch's Done, written by the candidate process
before it marks done, so the checker has everything the candidate says about a batch at the
moment the window closes (nothing can be computed later and claimed for it). On GPUs the candidate
spins for "go" (a wake-up through the socket costs tens of microseconds); "done" is a byte on the
socket that wakes the checker, whose spinning would take CPU from the candidate's calls. On CPUs a
byte on the socket is "go" too (spinning ranks would starve each other).
"""
from __future__ import annotations

import mmap
import os
import socket
import struct
import time
from collections.abc import Callable

from ..protocol import Failure, SpecError, decode, encode

MAX_FRAME = 64 << 20
PAGE_BYTES = 32 << 20          # the Done of a batch of thousands of calls fits
_HEAD = 64                     # go, done, payload length, armed, served (u64 each), then the payload at 64


class ChannelClosed(EOFError):
    """The other side is gone (or sent something that is not a message)."""


class Channel:
    def __init__(self, sock: socket.socket):
        self.sock = sock

    def send(self, msg: object, fds: tuple[int, ...] = ()) -> None:
        data = encode(msg)
        frame = struct.pack("<I", len(data)) + data
        if fds:
            socket.send_fds(self.sock, [frame[:4]], list(fds))
            self.sock.sendall(frame[4:])
        else:
            self.sock.sendall(frame)

    def _exactly(self, n: int, fds: list[int]) -> bytes:
        buf = b""
        while len(buf) < n:
            data, got, _, _ = socket.recv_fds(self.sock, n - len(buf), 4)
            if not data:
                raise ChannelClosed("the other process closed the channel")
            fds.extend(got)
            buf += data
        return buf

    def recv(self, timeout: float | None = None) -> tuple[object, list[int]]:
        """The next message and any descriptors that came with it; ChannelClosed when the peer is
        gone, TimeoutError after `timeout` seconds."""
        self.sock.settimeout(timeout)
        fds: list[int] = []
        try:
            (n,) = struct.unpack("<I", self._exactly(4, fds))
            if n > MAX_FRAME:
                raise ChannelClosed(f"a frame of {n} bytes")
            body = self._exactly(n, fds)
        except socket.timeout:
            raise TimeoutError("no message in time") from None
        except (ConnectionError, OSError) as e:
            if isinstance(e, TimeoutError):
                raise
            raise ChannelClosed(str(e)) from None
        try:
            return decode(body), fds
        except SpecError as e:
            raise ChannelClosed(str(e)) from None

    def poke(self) -> None:
        """A one-byte wake-up (CPU batches), outside the framing: sent and read in lockstep."""
        self.sock.sendall(b"\x00")

    def wait_poke(self, timeout: float | None = None) -> None:
        self.sock.settimeout(timeout)
        try:
            if not self.sock.recv(1):
                raise ChannelClosed("the other process closed the channel")
        except socket.timeout:
            raise TimeoutError("no wake-up in time") from None


class ControlPage:
    """Shared memory both processes map (created before the candidate process is forked)."""

    def __init__(self, nbytes: int = PAGE_BYTES):
        self.fd = os.memfd_create("kb-control", 0)
        os.ftruncate(self.fd, nbytes)
        self.mem = mmap.mmap(self.fd, nbytes)
        self.nbytes = nbytes

    def _get(self, off: int) -> int:
        return struct.unpack_from("<Q", self.mem, off)[0]

    def _set(self, off: int, v: int) -> None:
        struct.pack_into("<Q", self.mem, off, v)

    @property
    def go(self) -> int:
        return self._get(0)

    @property
    def done(self) -> int:
        return self._get(8)

    @property
    def armed(self) -> int:
        return self._get(24)

    @property
    def served(self) -> int:
        """How many messages the candidate process has served (its serve loop)."""
        return self._get(32)

    def mark_served(self, n: int) -> None:
        self._set(32, n)

    def mark_go(self, n: int) -> None:
        self._set(0, n)

    def mark_armed(self, n: int) -> None:
        self._set(24, n)

    def put_done(self, n: int, payload: bytes) -> None:
        """The batch's Done, then the done counter (x86 and ARM readers see the payload first:
        the counter is written last, and the reader reads it first)."""
        if len(payload) > self.nbytes - _HEAD:
            payload = encode_failure("the batch's outputs are too many to describe")
        self.mem[_HEAD:_HEAD + len(payload)] = payload
        self._set(16, len(payload))
        self._set(8, n)

    def payload(self) -> bytes:
        n = min(self._get(16), self.nbytes - _HEAD)
        return bytes(self.mem[_HEAD:_HEAD + n])

    def spin(self, off: int, want: int, deadline: float, alive: Callable[[], bool] | None = None) -> bool:
        """Wait until the counter at `off` reads `want`; False at the deadline or once `alive()`
        (asked every few milliseconds) says the other side is gone."""
        get = self._get
        n = 0
        while get(off) != want:
            n += 1
            if n % 4096 == 0 and ((alive is not None and not alive()) or time.monotonic() > deadline):
                return get(off) == want
        return True

    def close(self) -> None:
        self.mem.close()
        os.close(self.fd)


def encode_failure(message: str) -> bytes:
    from ..protocol import Done
    return encode(Done(outputs=[], failed={"category": Failure.RUNTIME_ERROR, "message": message, "traceback": ""}))
