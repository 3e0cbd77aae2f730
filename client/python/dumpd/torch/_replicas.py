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
make the check stop with a warning instead of reporting mismatches that are not faults. The
second is the period an operator asked of this rank (``dumpctl control --replica-every``):
the ranks adopt the request of the lowest rank that has one, all at the same step, so their
collectives stay in step.

Where the tensors are: CPU tensors are digested in place by the host's vectorised digest;
tensors on a device by :func:`dumpd.torch.digest` on that device. With NCCL the exchange
stays on the device and only the gathered table is copied back, asynchronously; it is read
at the next checked step, which waits for that copy only when the device is more than a
whole step behind the host (every rank must read the table at the same step: the period
they adopt from it keeps their collectives in step). Another backend with device tensors
copies the digests to the host (a synchronisation on a few bytes).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Set, Tuple

import numpy as np
import torch
import torch.distributed as dist

from dumpd import compare_replicas, fingerprint
from dumpd.torch._digest import digest

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


def _global_rank(group: Optional[Any], rank: int) -> int:
    if group is None:
        return rank
    if hasattr(dist, "get_global_rank"):
        return int(dist.get_global_rank(group, rank))
    return int(dist.distributed_c10d._get_global_rank(group, rank))  # torch 1.13


def _class_names(x: Any) -> Set[str]:
    return {c.__name__ for c in type(x).__mro__}


def _shard_refusal(named: List[Tuple[str, torch.Tensor]],
                   model: torch.nn.Module) -> Optional[str]:
    """Why `model`'s parameters cannot be replicas, or None. By class name: importing
    torch.distributed.fsdp fails on some torch builds, and a check must not."""
    for m in model.modules():
        if _class_names(m) & {"FullyShardedDataParallel", "FSDPModule"}:
            return (f"{type(m).__name__} shards the model's parameters (FSDP): each rank holds "
                    f"a different part, so they are not replicas")
    for n, p in named:
        if _class_names(p) & {"DTensor", "FlatParameter", "ShardedTensor"}:
            return (f"parameter {n} is a {type(p).__name__}, a shard of a distributed tensor: "
                    f"not a replica")
    return None


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
    # Device exchanges: the gathered table's copy on the host, and the event that says it
    # is there.
    host: Optional[torch.Tensor] = None
    ready: Any = None

    def table(self) -> torch.Tensor:
        if self.host is not None:
            return self.host
        return torch.stack(self.gathered).cpu()


@dataclass
class Mismatch:
    """One tensor whose replicas differ, as every rank of the group sees it."""

    step: int
    tensor: str
    ranks: List[int]  # global ranks whose digest differs from the majority's (no majority: all)
    digests: List[int] = field(repr=False)  # every rank's, in group rank order
    majority: bool = True  # False: no digest is held by more than half of the group


class ReplicaCheck:
    """The handle ``check_replicas`` returns: ``mismatches`` found so far, ``every`` (the period
    in force), ``remove()``."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, client: Any,
                 group: Optional[Any], every: int, first_step: int, gradients: bool,
                 parameters: bool, names: Optional[Sequence[str]], label: str,
                 digests: str) -> None:
        if every < 1:
            raise ValueError("every must be at least 1")
        if digests not in ("auto", "torch"):
            raise ValueError(f'digests must be "auto" or "torch", not {digests!r}')
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("check_replicas needs torch.distributed initialised "
                               "(dist.init_process_group): the digests travel over it")
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if names is not None:
            wanted = list(names)
            known = dict(named)
            missing = [n for n in wanted if n not in known]
            if missing:
                raise ValueError(f"check_replicas: the model has no trainable parameter named "
                                 f"{', '.join(missing[:5])}")
            named = [(n, known[n]) for n in wanted]
        refusal = _shard_refusal(named, model)
        if refusal is not None:
            raise ValueError("check_replicas: " + refusal + " (docs/replicas.md)")
        self.client = client
        self.group = group
        self.every = every
        self.step = first_step
        self.gradients = gradients
        self.parameters = parameters
        self.mismatches: List[Mismatch] = []
        self.stopped: Optional[str] = None
        self._prefix = label + "/" if label else ""
        self._torch_digests = digests == "torch"
        self._named = named
        self._optimizer = optimizer
        self._original_step = optimizer.step
        self._pending: Optional[_Exchange] = None
        self._reported: Set[str] = set()
        optimizer.step = self._step  # type: ignore[assignment]

    def remove(self) -> None:
        """Finishes the exchange in flight, then gives the optimizer its own step back (checks
        stacked on one optimizer are removed in the reverse order)."""
        self.finish()
        if self._optimizer.step == self._step:  # type: ignore[comparison-overlap]
            self._optimizer.step = self._original_step  # type: ignore[assignment]

    def finish(self) -> None:
        """Compares the exchange in flight now (a test, or the last step of a run)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.work.wait()
            if pending.ready is not None:
                pending.ready.synchronize()
            self._compare(pending)

    # The wrapped optimizer step.
    def _step(self, *args: Any, **kwargs: Any) -> Any:
        checked = self.stopped is None and self.step % self.every == 0
        names: List[str] = []
        digests: List[Any] = []
        if checked and self.gradients:
            for n, p in self._named:
                if p.grad is not None:
                    names.append(self._prefix + "grad:" + n)
                    digests.append(self._digest(p.grad))
        out = self._original_step(*args, **kwargs)
        if checked and self.parameters:
            for n, p in self._named:
                names.append(self._prefix + "param:" + n)
                digests.append(self._digest(p))
        if checked and names:
            self.finish()  # the previous exchange: done long ago
            self._send(names, digests)
        self.step += 1
        return out

    def _digest(self, t: torch.Tensor) -> Any:
        if t.device.type == "cpu" and not self._torch_digests:
            return tensor_fingerprint(t)
        return digest(t)

    def _signature_of(self, names: List[str]) -> int:
        text = ";".join(names) + "|" + ";".join(
            f"{tuple(p.shape)}:{p.dtype}" for _, p in self._named)
        return fingerprint(np.frombuffer(text.encode(), dtype=np.uint8))

    def _requested_every(self) -> int:
        every = getattr(self.client, "replica_every", None)
        return int(every) if every else 0

    def _send(self, names: List[str], digests: List[Any]) -> None:
        head = [_signed(self._signature_of(names)), self._requested_every()]
        if all(isinstance(d, int) for d in digests):
            local = torch.tensor(head + [_signed(d) for d in digests], dtype=torch.int64)
        else:
            device = next(d.device for d in digests if isinstance(d, torch.Tensor))
            local = torch.cat([torch.tensor(head, dtype=torch.int64, device=device)] + [
                d.to(device).reshape(1) if isinstance(d, torch.Tensor) else
                torch.tensor([_signed(d)], dtype=torch.int64, device=device) for d in digests])
            if local.device.type != "cpu" and dist.get_backend(self.group) != "nccl":
                local = local.cpu()  # this backend gathers host tensors: a few bytes synced
        world = dist.get_world_size(self.group)
        gathered = [torch.empty_like(local) for _ in range(world)]
        work = dist.all_gather(gathered, local, group=self.group, async_op=True)
        x = _Exchange(self.step, names, local, gathered, work)
        if local.device.type == "cuda":
            work.wait()  # NCCL: the current stream waits for the gather; the host does not
            x.host = torch.empty((world, local.numel()), dtype=torch.int64, pin_memory=True)
            x.host.copy_(torch.stack(gathered), non_blocking=True)
            x.ready = torch.cuda.Event()
            x.ready.record()
        self._pending = x

    def _adopt_period(self, table: torch.Tensor, step: int) -> None:
        # Every rank sees the same table at the same step: the same choice, from the next step.
        requests = [int(v) for v in table[:, 1].tolist() if int(v) > 0]
        if requests and requests[0] != self.every:
            warnings.warn(f"dumpd.torch.check_replicas: checking every {requests[0]} steps "
                          f"from step {step + 1} (dumpctl control --replica-every; was "
                          f"{self.every})", RuntimeWarning, stacklevel=4)
            self.every = requests[0]

    def _compare(self, x: _Exchange) -> None:
        table = x.table()  # [ranks, 2 + tensors]
        if not bool((table[:, 0] == table[0, 0]).all()):
            self.stopped = (f"the ranks of the group check different tensors (names, shapes or "
                            f"dtypes differ at step {x.step}): they cannot be replicas")
            warnings.warn("dumpd.torch.check_replicas stops: " + self.stopped, RuntimeWarning,
                          stacklevel=3)
            return
        self._adopt_period(table, self.step)
        digests = table[:, 2:].contiguous()
        world, columns = digests.shape
        reported = 0
        for c, has_majority, _, group_ranks in compare_replicas(digests.numpy(), world, columns):
            if x.names[c] in self._reported:
                continue  # a diverged parameter stays diverged: told once
            self._reported.add(x.names[c])
            ranks = [_global_rank(self.group, r) for r in group_ranks]
            values = [_unsigned(int(v)) for v in digests[:, c].tolist()]
            m = Mismatch(x.step, x.names[c], ranks, values, has_majority)
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
        if not tensor.startswith(self._prefix + "param:"):
            return
        for n, p in self._named:
            if self._prefix + "param:" + n == tensor:
                value = p.detach().cpu().contiguous()
                if value.dtype in (torch.bfloat16, torch.float16):
                    value = value.float()
                self.client.dump("Replica", tensor, "output", 0, value.numpy())
                return


def check_replicas(model: torch.nn.Module, optimizer: torch.optim.Optimizer, client: Any,
                   group: Optional[Any] = None, *, every: int = 1, first_step: int = 0,
                   gradients: bool = True, parameters: bool = True,
                   names: Optional[Sequence[str]] = None, label: str = "",
                   digests: str = "auto") -> ReplicaCheck:
    """Compares the gradients and parameters of a data-parallel model across the ranks of
    ``group`` (the default process group when None) on every ``every``-th optimizer step, and
    reports tensors whose replicas differ to ``client`` (docs/replicas.md).

    ``first_step``: the number of the first optimizer step (the iteration the reports name).
    ``names``: only these parameters (``model.named_parameters()`` names), e.g. the layer
    norms a tensor-parallel group replicates: ``check_replicas(model, opt, client,
    group=tp_group, names=[...], gradients=False, label="tp")``, stacked on the
    data-parallel check. ``label`` prefixes the reported names ("tp/param:ln.weight").
    ``digests``: "auto" (host tensors by the host's digest, device tensors on the device) or
    "torch" (every tensor by :func:`dumpd.torch.digest`, the device path, also on the CPU).
    An operator may change the period at run time: ``dumpctl control --replica-every N``.
    Returns a :class:`ReplicaCheck`; ``remove()`` gives the optimizer its step back.

    Only for tensors that are replicas: not ZeRO/FSDP shards, and not with optimizers or
    gradient compression that are not deterministic across ranks.
    """
    return ReplicaCheck(model, optimizer, client, group, every, first_step, gradients,
                        parameters, names, label, digests)


__all__: Tuple[str, ...] = ("check_replicas", "ReplicaCheck", "Mismatch", "tensor_fingerprint")
