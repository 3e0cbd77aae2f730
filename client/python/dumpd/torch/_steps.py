"""step()/steps() for PyTorch jobs: dumpd._core.steps, with CUDA losses deferred (copied with
non_blocking into pinned memory and read once a CUDA event says they arrived), so reporting a
CUDA loss never synchronises the step."""

from __future__ import annotations

from typing import Any, Tuple

from dumpd._core import steps as _core_steps
from dumpd._core.steps import StepScope, _PendingLosses, _pending, step, steps  # noqa: F401


def _is_cuda(loss: Any) -> bool:
    return getattr(loss, "is_cuda", False) is True


def _copy_cuda_loss(loss: Any) -> Tuple[Any, Any]:
    import torch
    host = torch.empty((), dtype=torch.float64, pin_memory=True)
    host.copy_(loss.detach().reshape(()), non_blocking=True)
    event = torch.cuda.Event()
    event.record()
    return host, event


_core_steps.defer(_is_cuda, _copy_cuda_loss)
