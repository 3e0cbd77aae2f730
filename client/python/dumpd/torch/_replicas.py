"""Replica fingerprints for a data-parallel model (docs/replicas.md).

After the data-parallel all-reduce every rank holds the same gradient bytes, and a
deterministic optimizer then gives every rank the same parameters: replicas must be
bit-identical. ``check_replicas`` wraps the optimizer's ``step``: before it, the digest
(:func:`dumpd.fingerprint`) of every gradient; after it, of every parameter. The digests of
a step leave in one asynchronous ``all_gather`` over the job's own process group; the next
checked step reads the result (it is long done by then: training never waits for it) and
compares each tensor across ranks. A tensor whose digest differs from the majority's on some
rank is reported (once: a diverged parameter stays diverged) to dumpd on every rank (``Client.report_replica_mismatch``): journalled in
``.dump_metadata/replicas.jsonl``, shown by ``dumpctl status``, and the flight recorder fires
a ``replica_mismatch`` trigger. Detection comes at the step of the fault or the next one.

The first column of every exchange is a digest of the checked tensors' names, shapes and
dtypes: ranks whose tensors cannot be replicas (another model, a sharded optimizer state)
make the check stop with a warning instead of reporting mismatches that are not faults.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, List, Optional, Set, Tuple

import numpy as np
import torch
import torch.distributed as dist

from dumpd import fingerprint

# Mismatches reported to dumpd per checked step at most (each is one journal line): a fault
# that touches every tensor is told by its first tensors.
MAX_REPORTS_PER_STEP = 16


def tensor_fingerprint(t: torch.Tensor) -> int:
    """The replica digest of a tensor's bytes in C order (docs/replicas.md).

    CPU tensors are read in place (bfloat16 and other types numpy lacks through a same-size
    integer view). CUDA tensors are copied to the host for now: the device kernel that keeps
    the step free of that copy is not built yet.
    """
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if not t.is_contiguous():
        t = t.contiguous()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    elif t.dtype is torch.bool:
        t = t.view(torch.uint8)
    return fingerprint(t.numpy())


def _signed(d: int) -> int:
    return d - (1 << 64) if d >= (1 << 63) else d


def _unsigned(d: int) -> int:
    return d + (1 << 64) if d < 0 else d


@dataclass
class _Exchange:
    step: int
    names: List[str]
    local: torch.Tensor
    gathered: List[torch.Tensor]
    work: Any


@dataclass
class Mismatch:
    """One tensor whose replicas differ, as every rank of the group sees it."""

    step: int
    tensor: str
    ranks: List[int]  # group ranks whose digest differs from the majority
    digests: List[int] = field(repr=False)  # every rank's, in group rank order


class ReplicaCheck:
    """The handle ``check_replicas`` returns: ``mismatches`` found so far, ``remove()``."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, client: Any,
                 group: Optional[Any], every: int, first_step: int,
                 gradients: bool, parameters: bool) -> None:
        if every < 1:
            raise ValueError("every must be at least 1")
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("check_replicas needs torch.distributed initialised "
                               "(dist.init_process_group): the digests travel over it")
        self.client = client
        self.group = group
        self.every = every
        self.step = first_step
        self.gradients = gradients
        self.parameters = parameters
        self.mismatches: List[Mismatch] = []
        self.stopped: Optional[str] = None
        self._named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self._optimizer = optimizer
        self._original_step = optimizer.step
        self._pending: Optional[_Exchange] = None
        self._reported: Set[str] = set()
        optimizer.step = self._step  # type: ignore[assignment]

    def remove(self) -> None:
        """Finishes the exchange in flight, then gives the optimizer its own step back."""
        self.finish()
        if self._optimizer.step == self._step:  # type: ignore[comparison-overlap]
            self._optimizer.step = self._original_step  # type: ignore[assignment]

    def finish(self) -> None:
        """Compares the exchange in flight now (a test, or the last step of a run)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.work.wait()
            self._compare(pending)

    # The wrapped optimizer step.
    def _step(self, *args: Any, **kwargs: Any) -> Any:
        checked = self.stopped is None and self.step % self.every == 0
        names: List[str] = []
        digests: List[int] = []
        if checked and self.gradients:
            for n, p in self._named:
                if p.grad is not None:
                    names.append("grad:" + n)
                    digests.append(tensor_fingerprint(p.grad))
        out = self._original_step(*args, **kwargs)
        if checked and self.parameters:
            for n, p in self._named:
                names.append("param:" + n)
                digests.append(tensor_fingerprint(p))
        if checked and names:
            self.finish()  # the previous exchange: done long ago
            self._send(names, digests)
        self.step += 1
        return out

    def _signature_of(self, names: List[str]) -> int:
        text = ";".join(names) + "|" + ";".join(
            f"{tuple(p.shape)}:{p.dtype}" for _, p in self._named)
        return fingerprint(np.frombuffer(text.encode(), dtype=np.uint8))

    def _send(self, names: List[str], digests: List[int]) -> None:
        signature = self._signature_of(names)
        local = torch.tensor([_signed(signature)] + [_signed(d) for d in digests],
                             dtype=torch.int64)
        world = dist.get_world_size(self.group)
        gathered = [torch.empty_like(local) for _ in range(world)]
        work = dist.all_gather(gathered, local, group=self.group, async_op=True)
        self._pending = _Exchange(self.step, names, local, gathered, work)

    def _compare(self, x: _Exchange) -> None:
        table = torch.stack(x.gathered)  # [ranks, 1 + tensors]
        if not bool((table[:, 0] == table[0, 0]).all()):
            self.stopped = (f"the ranks of the group check different tensors (names, shapes or "
                            f"dtypes differ at step {x.step}): they cannot be replicas")
            warnings.warn("dumpd.torch.check_replicas stops: " + self.stopped, RuntimeWarning,
                          stacklevel=3)
            return
        majority = torch.mode(table[:, 1:], dim=0).values
        differs = table[:, 1:] != majority.unsqueeze(0)
        columns = differs.any(dim=0).nonzero().flatten().tolist()
        reported = 0
        for c in columns:
            if x.names[c] in self._reported:
                continue  # a diverged parameter stays diverged: told once
            self._reported.add(x.names[c])
            ranks = differs[:, c].nonzero().flatten().tolist()
            digests = [_unsigned(int(v)) for v in table[:, 1 + c].tolist()]
            m = Mismatch(x.step, x.names[c], ranks, digests)
            self.mismatches.append(m)
            if reported < MAX_REPORTS_PER_STEP:
                self.client.report_replica_mismatch(x.step, m.tensor, m.ranks, m.digests)
                self._dump_evidence(m.tensor)
                reported += 1

    def _dump_evidence(self, tensor: str) -> None:
        # A flipped parameter stays different (every rank applies the same update to it), so
        # its value now shows which elements differ; the trigger the report fired writes it
        # with the iterations the recorder keeps. A gradient is recomputed every step: its
        # value now is no evidence, the kept iterations are.
        if not tensor.startswith("param:"):
            return
        for n, p in self._named:
            if "param:" + n == tensor:
                value = p.detach().cpu().contiguous()
                if value.dtype in (torch.bfloat16, torch.float16):
                    value = value.float()
                self.client.dump("Replica", tensor, "output", 0, value.numpy())
                return


def check_replicas(model: torch.nn.Module, optimizer: torch.optim.Optimizer, client: Any,
                   group: Optional[Any] = None, *, every: int = 1, first_step: int = 0,
                   gradients: bool = True, parameters: bool = True) -> ReplicaCheck:
    """Compares the gradients and parameters of a data-parallel model across the ranks of
    ``group`` (the default process group when None) on every ``every``-th optimizer step, and
    reports tensors whose replicas differ to ``client`` (docs/replicas.md).

    ``first_step``: the number of the first optimizer step (the iteration the reports name).
    Returns a :class:`ReplicaCheck`; ``remove()`` gives the optimizer its step back.

    Only for tensors that are replicas: not ZeRO/FSDP shards, and not with optimizers or
    gradient compression that are not deterministic across ranks.
    """
    return ReplicaCheck(model, optimizer, client, group, every, first_step, gradients,
                        parameters)


__all__: Tuple[str, ...] = ("check_replicas", "ReplicaCheck", "Mismatch", "tensor_fingerprint")
