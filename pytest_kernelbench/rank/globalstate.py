"""The global torch state rule, in the candidate process: numerics and execution settings that a
candidate may change inside its own call only if it restores them before returning, and may not
change at import (default dtype, TF32 and reduced-precision flags, matmul precision, grad and
inference mode, autocast, deterministic algorithms, dispatch/function modes left active, the
current device and stream). Since the reference runs in the checker, a change can no longer touch
the reference's numerics; the rule keeps a candidate's calls honest about what they compute
(TF32 for a float32 problem is another computation). Best effort: it is the candidate's process.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from collections.abc import Callable

RULE = "global torch state"


class GlobalState:
    """Process-wide torch settings a candidate could leave changed for the reference and the check
    (a dispatch mode that rewrites comparisons; TF32 or autocast that degrades the reference)."""

    def __init__(self):
        self.cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        self.snapshot = self.read()
        if self.cuda:
            self.stream = torch.cuda.current_stream()

    def read(self) -> dict:
        s = {"dispatch modes left active": torch._C._len_torch_dispatch_stack(),
             "torch function modes left active": torch._C._len_torch_function_stack(),
             "default dtype": torch.get_default_dtype(),
             "inference mode": torch.is_inference_mode_enabled(),
             "float32 matmul precision": torch.get_float32_matmul_precision(),
             "deterministic algorithms": torch.are_deterministic_algorithms_enabled()}
        for flag in ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
            try:
                s[f"torch.backends.cuda.matmul.{flag}"] = getattr(torch.backends.cuda.matmul, flag)
            except Exception:  # noqa: BLE001 - flag missing in this torch
                pass
        try:
            s["torch.backends.cudnn.allow_tf32"] = torch.backends.cudnn.allow_tf32
        except Exception:  # noqa: BLE001
            pass
        for dev in ("cpu", "cuda"):
            try:
                s[f"autocast {dev}"] = torch.is_autocast_enabled(dev)
            except Exception:  # noqa: BLE001 - older torch: no device argument
                pass
        if getattr(self, "cuda", False):
            s["current CUDA device"] = torch.cuda.current_device()
            s["current CUDA stream"] = torch.cuda.current_stream().cuda_stream
        return s

    def check(self) -> list[str]:
        """What changed since the snapshot ("name: before -> now"), restored; [] when nothing."""
        now = self.read()
        changed = [f"{k} {v!r} -> {now.get(k)!r}" for k, v in self.snapshot.items() if now.get(k) != v]
        if changed:
            self.restore(now)
        return changed

    def restore(self, now: dict):
        s = self.snapshot
        from torch.utils._python_dispatch import _pop_mode
        for _ in range(64):
            if torch._C._len_torch_dispatch_stack() <= s["dispatch modes left active"]:
                break
            try:
                _pop_mode()
            except Exception:  # noqa: BLE001
                break
        for _ in range(64):
            if torch._C._len_torch_function_stack() <= s["torch function modes left active"]:
                break
            try:
                torch._C._pop_torch_function_stack()
            except Exception:  # noqa: BLE001
                break
        steps: list[Callable[..., object]] = [lambda: torch.set_default_dtype(s["default dtype"]),
                                              lambda: torch.set_float32_matmul_precision(s["float32 matmul precision"]),
                                              lambda: torch.use_deterministic_algorithms(s["deterministic algorithms"])]
        for flag in ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
            key = f"torch.backends.cuda.matmul.{flag}"
            if key in s:
                steps.append(lambda flag=flag, key=key: setattr(torch.backends.cuda.matmul, flag, s[key]))
        if "torch.backends.cudnn.allow_tf32" in s:
            steps.append(lambda: setattr(torch.backends.cudnn, "allow_tf32", s["torch.backends.cudnn.allow_tf32"]))
        for dev in ("cpu", "cuda"):
            if f"autocast {dev}" in s:
                steps.append(lambda dev=dev: torch.set_autocast_enabled(dev, s[f"autocast {dev}"]))
        if self.cuda:
            steps.append(lambda: torch.cuda.set_device(s["current CUDA device"]))
            steps.append(lambda: torch.cuda.set_stream(self.stream))
        for step in steps:
            try:
                step()
            except Exception:  # noqa: BLE001 - best effort; the item fails anyway
                pass
