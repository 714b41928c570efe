"""The solver processes' own identity (rank/identity.py, issue 44 class 1): the uid pair of a job,
which folders need the mount namespace, and a process hardened with it (forked here)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from pytest_kernelbench.rank import identity, sandbox

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="only root changes a process's identity")


def test_a_jobs_identities_come_from_its_folder_and_never_meet():
    cand, ref = identity.job_identities("/runs/r1/jobs/a-123")
    assert identity.job_identities("/runs/r1/jobs/a-123") == (cand, ref)        # the same on every rank
    assert (cand.uid, cand.gid, ref.uid, ref.gid) == (cand.uid, cand.uid, cand.uid + 1, cand.uid + 1)
    assert identity.UID_BASE <= cand.uid and ref.uid < 2 ** 31 - 1 and (cand.uid - identity.UID_BASE) % 2 == 0
    assert identity.job_identities("/runs/r1/jobs/b-456")[0] != cand
    assert identity.env(cand) == {"USER": cand.user, "LOGNAME": cand.user}


def test_the_outermost_closed_folder_is_the_one_a_tmpfs_covers():
    foreign = identity.Identity(identity.UID_BASE + 10, identity.UID_BASE + 10, "x")
    top = Path(tempfile.mkdtemp(dir="/tmp"))          # 0700, the caller's
    try:
        inner = top / "a" / "b"
        inner.mkdir(parents=True)
        assert identity.closed_ancestor(str(inner / "c"), foreign) == str(top)
        assert identity.unreachable([str(inner)], foreign)      # without a namespace: uid 0 kept
        owner = identity.Identity(os.geteuid(), os.getegid(), "me")
        assert identity.closed_ancestor(str(inner / "c"), owner) is None
        top.chmod(0o755)
        assert identity.closed_ancestor(str(inner / "c"), foreign) is None
        assert not identity.unreachable([str(inner)], foreign)
    finally:
        top.chmod(0o700)
        import shutil
        shutil.rmtree(top)


@ROOT_ONLY
@pytest.mark.e2e
def test_a_hardened_process_owns_nothing_yet_reaches_its_folders():
    """Forked and hardened as the candidate process is: a uid of its own, the system files closed to
    it (opened for writing and closed, never written), its folder under a closed one still in reach,
    and the rest of that closed folder hidden."""
    top = Path(tempfile.mkdtemp(dir="/tmp"))           # 0700 root: closed to the new uid
    try:
        scratch, hidden = top / "job" / "scratch", top / "job" / "control"
        scratch.mkdir(parents=True)
        hidden.mkdir()
        (hidden / "key").write_text("secret")
        ident, _ = identity.job_identities(top / "job")
        identity.give([scratch], ident)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            lines = []
            try:
                layers = sandbox.harden([], [str(scratch)], ident)
                lines.append(" ".join(layers))
                lines.append(str(os.getresuid()))
                for path in ("/proc/sys/kernel/core_pattern", f"/proc/{os.getppid()}/autogroup"):
                    try:
                        os.close(os.open(path, os.O_WRONLY))
                        lines.append(f"{path} opens")
                    except OSError:
                        lines.append(f"{path} refused")
                (scratch / "mine").write_text("ok")
                lines.append("wrote " + (scratch / "mine").read_text())
                lines.append("hidden " + str(os.path.exists(hidden / "key")))
                lines.append("sees " + " ".join(sorted(os.listdir(top))) + " | " + " ".join(sorted(os.listdir(top / "job"))))
            except BaseException as e:  # noqa: BLE001
                lines.append(f"error {type(e).__name__}: {e}")
            os.write(w, "\n".join(lines).encode())
            os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            out = f.read().splitlines()
        os.waitpid(pid, 0)
        assert "uid" in out[0].split() and "mountns" in out[0].split(), out
        assert out[1] == str((ident.uid,) * 3), out
        assert all(ln.endswith("refused") for ln in out[2:4]), out
        assert out[4:] == ["wrote ok", "hidden False", "sees job | scratch"], out
        assert (scratch / "mine").stat().st_uid == ident.uid
    finally:
        import shutil
        shutil.rmtree(top)
