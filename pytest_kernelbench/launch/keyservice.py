"""How a job's checkers get its key and input nonce: from the launcher, over an abstract UNIX
socket named after the job, in memory, never as a file. The launcher answers a connection only from a process it
started as a checker of this job (its pid, through SO_PEERCRED: a rank the rank server forked, or
a child of this job's torchrun agent that carries the job's token), and each rank once. A
candidate process is a child of its checker and is refused, whatever it sends."""
from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Callable

ACCEPT_WAIT_S = 5.0      # a checker may connect before the launcher has recorded its pid


class KeyService:
    def __init__(self, address: str, key: str, nonce: str, allowed: Callable[[int], bool]):
        self.address, self.secret = address, {"key": key, "nonce": nonce}
        self.allowed = allowed
        self.served: set[int] = set()
        self.refused: list[str] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(address)
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, name="kb-keyservice", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            with conn:
                try:
                    self._answer(conn)
                except OSError:
                    pass

    def _answer(self, conn: socket.socket) -> None:
        pid, _, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        conn.settimeout(5.0)
        data = b""
        while not data.endswith(b"\n") and len(data) < 4096:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        try:
            rank = int(json.loads(data or b"{}")["rank"])
        except (ValueError, KeyError, TypeError):
            rank = -1
        end = time.monotonic() + ACCEPT_WAIT_S
        while not self.allowed(pid) and time.monotonic() < end:
            time.sleep(0.01)
        if rank < 0 or rank in self.served or not self.allowed(pid):
            self.refused.append(f"pid {pid} (rank {rank})")
            conn.sendall(b"{}\n")
            return
        self.served.add(rank)
        conn.sendall(json.dumps(self.secret).encode() + b"\n")

    def close(self) -> None:
        self.stopping = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)      # wakes the accept() now, not at its timeout (0.2 s)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass
        self.thread.join(2.0)
        self.secret = {}
