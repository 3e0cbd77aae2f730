"""What the hooks of one attach() share: dumpd._core.session.Session, with PyTorch's items
(dumpd.torch._items) and where CUDA tensors go."""

from __future__ import annotations

import warnings

import dumpd
from dumpd._core.session import Session
from dumpd._core.session import check_errors as _check_errors  # noqa: F401
from dumpd._core.session import warn as _warn  # noqa: F401
from dumpd.torch._items import _Items


class _Session(Session):
    """A PyTorch attach()'s session."""

    __slots__ = ("cuda_mode",)

    def __init__(self, client: dumpd.Client, errors: str) -> None:
        super().__init__(client, errors)
        self.cuda_mode: str | None = None  # "device" or "host", decided at the first one

    def make_items(self, dump_once: bool) -> _Items:
        return _Items(self, dump_once)

    def cuda_on_device(self) -> bool:
        """True when CUDA tensors go device-to-ring; False for the host fallback. Raises
        DaemonError when CUDA cannot be used and the client did not ask for the fallback."""
        if self.cuda_mode is None:
            reason = dumpd.cuda_unavailable_reason()
            if reason is None:
                self.cuda_mode = "device"
            elif self.client.cuda_fallback == "host":
                warnings.warn(f"dumpd: {reason}; CUDA tensors are copied with tensor.cpu() "
                              "(cuda_fallback=\"host\"), which synchronises with the device",
                              RuntimeWarning, stacklevel=4)
                self.cuda_mode = "host"
            else:
                raise dumpd.DaemonError(f"{reason}. Pass cuda_fallback=\"host\" to dumpd.Client "
                                        "to copy CUDA tensors through host memory instead")
        return self.cuda_mode == "device"
