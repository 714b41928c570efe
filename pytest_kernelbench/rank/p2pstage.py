"""Point-to-point of CUDA tensors over gloo, staged through host memory (issue 46): where ranks share
a GPU (--kb-oversubscribe) both process groups are gloo, which sends no CUDA tensors point to point.
torch.distributed's send / recv / isend / irecv (and so batch_isend_irecv and P2POp, which call
them) are wrapped in every process of such a job (checker, reference process, candidate process):
a CUDA tensor goes to the host, through gloo, and back into the caller's tensor when the receive
completes (wait(), or the blocking call's return). CPU tensors pass through untouched. Installed
below the forbid guard (its wrappers count the calls as before: one staged call is one gloo
operation, as the sequence audit expects). Correctness only: a shared placement is never timed.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

FUNCS = ("send", "recv", "isend", "irecv")
_ORIGINAL: dict[str, Any] = {}


def staged(t: object) -> bool:
    """Whether a tensor goes through host memory (a CUDA tensor; tests widen it to CPU tensors)."""
    return isinstance(t, torch.Tensor) and t.device.type == "cuda"


class StagedRecv:
    """An irecv's work whose wait() also copies the host buffer into the caller's tensor."""

    def __init__(self, work: Any, host: torch.Tensor, dst: torch.Tensor):
        self._work, self._host, self._dst, self._done = work, host, dst, False

    def _finish(self) -> None:
        if not self._done:
            self._dst.copy_(self._host)
            self._done = True

    def wait(self, *args: Any, **kwargs: Any) -> bool:
        ok = self._work.wait(*args, **kwargs)
        self._finish()
        return True if ok is None else ok

    def is_completed(self) -> bool:
        if self._work.is_completed():
            self._finish()
            return True
        return False

    def is_success(self) -> bool:
        return self._work.is_success()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def _send(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    return _ORIGINAL["send"](tensor.detach().to("cpu") if staged(tensor) else tensor, *args, **kwargs)


def _isend(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    # the host copy lives as long as the work: gloo reads it while the send is in flight
    if not staged(tensor):
        return _ORIGINAL["isend"](tensor, *args, **kwargs)
    host = tensor.detach().to("cpu")
    work = _ORIGINAL["isend"](host, *args, **kwargs)
    return _KeepAlive(work, host) if work is not None else None


class _KeepAlive:
    """An isend's work holding its host buffer until the caller lets go of the work."""

    def __init__(self, work: Any, host: torch.Tensor):
        self._work, self._host = work, host

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)

    def wait(self, *args: Any, **kwargs: Any) -> bool:
        ok = self._work.wait(*args, **kwargs)
        return True if ok is None else ok


def _recv(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    if not staged(tensor):
        return _ORIGINAL["recv"](tensor, *args, **kwargs)
    host = torch.empty(tensor.shape, dtype=tensor.dtype)
    src = _ORIGINAL["recv"](host, *args, **kwargs)
    tensor.copy_(host)
    return src


def _irecv(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    if not staged(tensor):
        return _ORIGINAL["irecv"](tensor, *args, **kwargs)
    host = torch.empty(tensor.shape, dtype=tensor.dtype)
    work = _ORIGINAL["irecv"](host, *args, **kwargs)
    return StagedRecv(work, host, tensor) if work is not None else None


_WRAPPERS = {"send": _send, "recv": _recv, "isend": _isend, "irecv": _irecv}


def serve(backend: str, cuda: bool) -> None:
    """Staging where a process needs it: its group is gloo and its tensors live on a GPU (the
    shared placement, the only job whose CUDA ranks run gloo); elsewhere nothing is wrapped."""
    if backend == "gloo" and cuda:
        install()


def install() -> None:
    """Wrap the four calls in torch.distributed and in distributed_c10d (P2POp checks its op against
    the latter's names, and batch_isend_irecv calls the op it holds). Idempotent."""
    if _ORIGINAL:
        return
    for name in FUNCS:
        _ORIGINAL[name] = getattr(c10d, name)
        setattr(c10d, name, _WRAPPERS[name])
        setattr(dist, name, _WRAPPERS[name])


def uninstall() -> None:
    for name, fn in _ORIGINAL.items():
        setattr(c10d, name, fn)
        setattr(dist, name, fn)
    _ORIGINAL.clear()
