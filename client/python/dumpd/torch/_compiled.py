"""The dump point torch.compile sees: a registered custom op, ``dumpd::dump``.

Under ``torch.compile`` the forward hooks of :func:`dumpd.torch.attach` are traced by dynamo
instead of run. A Python call into the client would break the graph at every module, so a
traced hook calls ``torch.ops.dumpd.dump(site, inputs, outputs)`` instead:

* it is a ``torch.library`` custom op with a fake (meta) implementation that does nothing,
  so dynamo and AOTAutograd trace it without running it;
* it is registered as an *ordered effect*, so AOTAutograd threads an effect token through
  it and inductor keeps it, in program order, although it returns nothing;
* ``site`` is a plain integer naming the hook (op type, full name, sides, session) in a
  table here, and everything that decides whether to dump (the iteration, the job config's
  filters, ``dumpctl control``, the flight recorder) is asked when the op *runs*, by the
  same ``_Session.dump`` the eager hooks call. Nothing of it is a guard: changing it never
  recompiles.

The compiled graph hands the op its intermediate buffers. Inductor reuses a buffer for a
later result without bumping the tensor's version counter, so dump once (a repeated tensor
sent as a reference) is off for tensors dumped from a compiled graph: each is copied.

Needs ``torch.library.custom_op`` and ordered effects (torch 2.5 and later); with an older
torch, attach() hooks run eagerly only, as before.
"""

from __future__ import annotations

import threading
from typing import Any, List, Optional

import torch

from dumpd.torch._session import _Session

_OP = "dumpd::dump"
_lock = threading.Lock()
# site -> (session, op_type, full name, dump inputs, dump outputs); sites are never reused,
# so a graph compiled for a hook that was removed can never dump under another hook's name.
_sites: dict = {}
_next_site = [0]


def _unavailable_reason() -> Optional[str]:
    library = torch.library
    if not hasattr(library, "custom_op") or not hasattr(library, "_register_effectful_op"):
        return f"torch {torch.__version__} has no torch.library.custom_op with effects"
    return None


UNAVAILABLE = _unavailable_reason()


def is_compiling() -> bool:
    """True while dynamo traces (then the hook emits the custom op); False when running."""
    return False


if UNAVAILABLE is None:
    is_compiling = torch.compiler.is_compiling  # noqa: F811  (dynamo constant-folds it)

    @torch.library.custom_op(_OP, mutates_args=())
    def _dump(site: int, inputs: List[Optional[torch.Tensor]],
              outputs: List[Optional[torch.Tensor]]) -> None:
        entry = _sites.get(site)
        if entry is None:  # the hook was removed after this graph was compiled
            return
        session, op_type, name, want_in, want_out = entry
        session.dump(op_type, name, inputs, outputs, want_in, want_out, dump_once=False)

    @_dump.register_fake
    def _dump_fake(site: int, inputs: List[Optional[torch.Tensor]],
                   outputs: List[Optional[torch.Tensor]]) -> None:
        return None

    torch.library._register_effectful_op(_OP, torch.library.EffectType.ORDERED)


def add_site(session: _Session, op_type: str, name: str, want_in: bool, want_out: bool) -> int:
    with _lock:
        site = _next_site[0]
        _next_site[0] += 1
        _sites[site] = (session, op_type, name, want_in, want_out)
    return site


def remove_site(site: int) -> None:
    with _lock:
        _sites.pop(site, None)


def _flatten(value: Any, out: List[Optional[torch.Tensor]]) -> List[Optional[torch.Tensor]]:
    """Tensors of `value` in dump slot order (nested tuple/list/dict), None for other leaves
    (their slot stays reserved, as in eager)."""
    if isinstance(value, (tuple, list)):
        for v in value:
            _flatten(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _flatten(v, out)
    else:
        out.append(value if isinstance(value, torch.Tensor) else None)
    return out


def emit(site: int, inputs: Any, outputs: Any) -> None:
    """What a hook does while dynamo traces it: one dumpd::dump node in the graph."""
    torch.ops.dumpd.dump(site, _flatten(inputs, []), _flatten(outputs, []))
