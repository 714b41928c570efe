"""The rank side of `--kb-launcher=slurm` (launch/slurm.py): a checker started as one task of a
Slurm step, on any node of the allocation.

- Its rank variables come from Slurm's (SLURM_PROCID/NTASKS/LOCALID/NODEID, `slurm_env`).
- Its key and input nonce arrive on the step's stdin (`srun --input=all`), written there by the
  launcher. The checker moves that pipe off fd 0 before it forks its candidate process (whose
  stdin is /dev/null, and which closes every other inherited descriptor before candidate code
  runs; Landlock then keeps it out of /proc/<checker>/fd), and reads the key only after the fork:
  the candidate never had it, as with the fork launcher's socket.
- The rendezvous: rank 0 serves the checkers' TCPStore on a port the OS picks, on an address the
  other nodes reach, and tells the launcher on its own stdout (also moved off fd 1 before the
  fork); the launcher writes the address to every task's stdin. No file on a shared filesystem
  (an NFS client may not see a new file for its attribute-cache time) is involved.
"""
from __future__ import annotations

import json
import os
import socket
import time

STORE_LINE = "kb-store"       # rank 0 -> launcher: "kb-store <host> <port>"


def slurm_env(env: dict[str, str] | os._Environ) -> dict[str, str]:
    """The rank variables a checker (and, inherited, its candidate process) reads, from the Slurm
    task variables: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (ranks on this node), GROUP_RANK
    (this node's index) and KB_NODES (nodes the step spans). The launcher gives every node the same
    number of tasks, so ranks r*L .. r*L+L-1 share node r (L = LOCAL_WORLD_SIZE)."""
    world = env.get("SLURM_STEP_NUM_TASKS") or env["SLURM_NTASKS"]
    nodes = env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES") or "1"
    # the step's tasks per node ("2(x2)", "2,1"): this node's count is the first where all are equal
    here = (env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_NTASKS_PER_NODE") or world).split("(")[0].split(",")[0]
    return {"RANK": env["SLURM_PROCID"], "WORLD_SIZE": world, "LOCAL_RANK": env["SLURM_LOCALID"],
            "GROUP_RANK": env.get("SLURM_NODEID", "0"), "ROLE_RANK": env["SLURM_PROCID"], "LOCAL_WORLD_SIZE": here,
            "KB_NODES": nodes}


class StepIO:
    """The step's stdin/stdout, moved to private descriptors (see the module's docstring)."""

    def __init__(self) -> None:
        self.inp, self.out = os.dup(0), os.dup(1)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.close(null)
        self.buf = b""

    def line(self, timeout_s: float) -> dict:
        """The next line the launcher wrote, as JSON ({} when the step's stdin closed)."""
        import select
        end = time.monotonic() + timeout_s
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.inp], [], [], left)[0]:
                raise TimeoutError(f"the launcher wrote nothing to this task's stdin within {timeout_s:.0f} s")
            chunk = os.read(self.inp, 4096)
            if not chunk:
                return {}
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line or b"{}")

    def publish_store(self, port: int) -> None:
        os.write(self.out, f"{STORE_LINE} {reachable_address()} {port}\n".encode())


def reachable_address() -> str:
    """An address of this node the other nodes reach: KB_SLURM_ADDRESS when set (a cluster whose
    host names resolve to a management network), else this host's name resolved."""
    if os.environ.get("KB_SLURM_ADDRESS"):
        return os.environ["KB_SLURM_ADDRESS"]
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return socket.gethostname()


def store(io: StepIO, rank: int, world: int, timeout, timeout_s: float):
    """The checkers' TCPStore: rank 0 serves it (on every interface), the others join at the
    address the launcher relays."""
    from torch.distributed import TCPStore
    if rank == 0:
        server = TCPStore("0.0.0.0", 0, world, True, timeout=timeout, wait_for_workers=False)
        io.publish_store(server.port)
        io.line(timeout_s)          # the relay comes back to rank 0 too: consume it
        return server
    where = io.line(timeout_s).get("store")
    if not where:
        raise TimeoutError("the launcher relayed no rendezvous address (rank 0 did not start its store)")
    host, port = where
    return TCPStore(host, int(port), world, False, timeout=timeout)
