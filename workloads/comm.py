"""Every communication call of the workloads goes through here, so ``--comm off`` can skip them all.

``--comm off`` runs the same program with no communication: the same compute, the same ranges
(``tp_allreduce``, ``bucket_launch#i`` ... still open and close), but no collective, send or recv is
issued. It measures what the compute costs alone: the *overlap tax* of whatif.md §4 is how much
slower the same compute ran beside communication. Results are then wrong (no averaging, each rank
trains alone), which is the point: only the timing is kept.

What a skipped call leaves in its output tensor, so that the compute that follows sees ordinary
numbers (not uninitialised memory, whose NaNs or denormals would change the compute's speed):

- all-reduce, reduce-scatter: the input, unreduced (reduce-scatter: this rank's slice of it);
- all-gather: this rank's shard copied into every slot;
- all-to-all: the input copied (every chunk stays with its sender);
- recv: zeros; send, barrier: nothing.

Those copies are the only compute ``--comm off`` adds (a few element-wise copies per step).

Names: every blocking call runs inside a ``span`` whose name starts with its purpose
(``tp_allreduce``, ``pp_send``, ``fsdp_allgather``, ``moe_dispatch``...) followed by
``pg=NAME`` (the process group's name, ``pg_name`` in the trace's ``distributedInfo.pg_config``),
``peer=R`` for point-to-point (a global rank) and ``bytes=N`` (the bytes this rank sends or reduces).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from .instrument import comm, span

# torch 2.13 renamed them (the old names warn); older torch has only the old names
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

#: Set by the training loop (``--comm``): once per process, or before each step with
#: ``--comm alternate`` (off in the even steps, plant.py).
ENABLED = True
#: ``--comm alternate``: ENABLED changes from step to step (DDP then decides per bucket).
VARIES = False


def set_enabled(on: bool, varies: bool = False) -> None:
    global ENABLED, VARIES
    ENABLED, VARIES = on, varies


class Done:
    """What a skipped asynchronous collective returns: already complete."""

    def wait(self) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def get_future(self) -> Any:
        fut: torch.futures.Future[None] = torch.futures.Future()
        fut.set_result(None)
        return fut


def pg_name(group: Any = None) -> str:
    """The process group's name as ``distributedInfo.pg_config`` spells it (``0``: the world)."""
    pg = group if group is not None else dist.group.WORLD
    return str(pg.group_name)


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def label(purpose: str, t: torch.Tensor, group: Any = None, peer: int | None = None) -> str:
    """``purpose pg=NAME [peer=R] bytes=N``: the name of the range around one call."""
    where = f" peer={peer}" if peer is not None else ""
    return f"{purpose} pg={pg_name(group)}{where} bytes={nbytes(t)}"


def all_reduce(t: torch.Tensor, purpose: str, group: Any = None) -> None:
    """Blocking all-reduce (SUM) of ``t`` in place, in a ``purpose ...`` range."""
    with span(label(purpose, t, group)):
        if ENABLED:
            with comm("all_reduce"):
                dist.all_reduce(t, group=group)


def all_gather(out: torch.Tensor, shard: torch.Tensor, purpose: str, group: Any = None) -> None:
    """Blocking all-gather of equal ``shard``s into ``out`` (rank order)."""
    with span(label(purpose, shard, group)):
        if ENABLED:
            with comm("all_gather"):
                _ALL_GATHER(out, shard, group=group)
        else:
            out.view(-1, shard.numel()).copy_(shard.reshape(1, -1))


def reduce_scatter(out: torch.Tensor, full: torch.Tensor, purpose: str, group: Any = None) -> None:
    """Blocking reduce-scatter (SUM): ``out`` gets this rank's slice of the sum of ``full``.

    gloo has it in torch 2.13 (``reduce_scatter_single``, formerly ``reduce_scatter_tensor``), implemented as an all-reduce: the trace's
    event on the gloo thread is named ``gloo:all_reduce``; the range name says the purpose.
    """
    with span(label(purpose, full, group)):
        if ENABLED:
            with comm("reduce_scatter"):
                _REDUCE_SCATTER(out, full, group=group)
        else:
            r = dist.get_rank(group)
            out.copy_(full.reshape(-1)[r * out.numel() : (r + 1) * out.numel()].view_as(out))


def all_to_all(out: torch.Tensor, inp: torch.Tensor, purpose: str, group: Any = None) -> None:
    """Blocking all-to-all with equal splits along dim 0."""
    with span(label(purpose, inp, group)):
        if ENABLED:
            with comm("all_to_all"):
                dist.all_to_all_single(out, inp, group=group)
        else:
            out.copy_(inp)


def send(t: torch.Tensor, peer: int, purpose: str) -> None:
    """Blocking send to global rank ``peer``."""
    with span(label(purpose, t, peer=peer)):
        if ENABLED:
            with comm("send"):
                dist.send(t, peer)


def recv(t: torch.Tensor, peer: int, purpose: str) -> None:
    """Blocking recv from global rank ``peer`` into ``t``."""
    with span(label(purpose, t, peer=peer)):
        if ENABLED:
            with comm("recv"):
                dist.recv(t, peer)
        else:
            t.zero_()


def barrier(purpose: str) -> None:
    """A barrier in a ``purpose`` range (the range stays, empty, with communication off)."""
    with span(purpose):
        if ENABLED:
            dist.barrier()


def all_reduce_async(t: torch.Tensor) -> Any:
    """``dist.all_reduce(t, async_op=True)``, or a :class:`Done` when communication is off."""
    if not ENABLED:
        return Done()
    return dist.all_reduce(t, async_op=True)
