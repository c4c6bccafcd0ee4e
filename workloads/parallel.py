"""Model-parallel reference workloads: tensor, pipeline, FSDP-style and expert (MoE) parallelism.

Each is a small MLP-shaped model (width ``d`` = the preset's ``mlp_width``, ``preset.mlp_layers``
layers, 16 classes) written with explicit communication, so the trace shows every call under a
purpose range (see ``comm``: ``tp_allreduce pg=1 bytes=N``...). The training loop (train.py) runs
the same phases for every strategy: ``dataloader``, ``forward``, ``backward``, ``grad_sync`` (where
the workload has one) and ``optimizer``.

- ``tp``: tensor parallel in groups of ``--tp-size`` consecutive ranks (world 4, tp 2: groups
  {0,1} {2,3}, ``group_desc`` ``tp0`` ``tp1``), data parallel across them (groups {0,2} {1,3},
  ``dp0`` ``dp1``). Each layer is Megatron's column-parallel fc1 + row-parallel fc2: forward ends
  in a ``tp_allreduce`` of the partial outputs; backward starts each layer's input gradient with a
  ``tp_allreduce``. After backward, one ``dp_allreduce`` of all gradients in the DP group.
- ``pipeline``: GPipe, one stage per rank (``preset.mlp_layers`` split between them),
  ``--micro-batches`` micro-batches: all forwards (``microbatch#k``: ``pp_recv`` activations from
  the previous stage, compute, ``pp_send`` to the next), then all backwards in reverse order
  (``pp_recv`` the output gradient, backward, ``pp_send`` the input gradient), all blocking
  ``dist.send`` / ``dist.recv``. No data parallelism, no ``grad_sync``.
- ``fsdp``: every layer's weight and bias are one flat parameter sharded over all ranks. Forward
  and backward ``fsdp_allgather`` the full parameter right before the layer uses it (and drop it
  after, as FSDP does); backward ``fsdp_reduce_scatter``s that layer's gradient right after
  computing it. Each rank trains on its own slice of the batch.
- ``moe``: one expert MLP per rank, a top-1 router: ``moe_dispatch`` (all-to-all of up to
  ``capacity`` tokens per expert), the local expert, ``moe_combine`` (all-to-all back), gated sum;
  backward runs the two all-to-alls in reverse (``moe_combine_grad``, ``moe_dispatch_grad``). The
  replicated layers (input projection, router, head) are averaged in ``grad_sync``
  (``dp_allreduce`` over the world).

With SGD each trains to the parameters one process gets on the global batch (tests/test_workloads.py).

``--slow-rank R --slow-ms X --slow-phase P``: rank R sleeps X ms in a ``straggler_sleep`` range at
the start of phase P, each step; the pipeline sleeps in every micro-batch's forward (or backward)
compute of its stage instead, after the recv (a long stage).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

from . import comm
from .instrument import span
from .models import MLP_CLASSES, Preset

PARALLEL = ("tp", "pipeline", "fsdp", "moe")

Straggle = Callable[[str], None]


def _batch(p: Preset, rows: int, shards: int, shard: int, step: int, seed: int) -> Any:
    """Rows ``shard*rows:(shard+1)*rows`` of step ``step``'s seeded global batch."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    x = torch.randn(rows * shards, p.mlp_width, generator=g)
    y = torch.randint(0, MLP_CLASSES, (rows * shards,), generator=g)
    return x[shard * rows : (shard + 1) * rows], y[shard * rows : (shard + 1) * rows]


class ParallelWorkload:
    """What the training loop calls: ``load`` / ``forward`` / ``backward`` / ``sync`` per step."""

    has_sync = False
    #: phases whose straggler sleep the workload places itself (the loop then does not)
    straggles_inside: frozenset[str] = frozenset()

    def __init__(
        self,
        p: Preset,
        rank: int,
        world: int,
        device: torch.device,
        rows: int,
        seed: int,
        straggle: Straggle,
    ) -> None:
        self.p, self.rank, self.world, self.device = p, rank, world, device
        self.rows, self.seed, self.straggle = rows, seed, straggle

    def params(self) -> list[nn.Parameter]:
        raise NotImplementedError

    def load(self, step: int) -> Any:
        raise NotImplementedError

    def forward(self, batch: Any) -> Any:
        raise NotImplementedError

    def backward(self, state: Any) -> None:
        state.backward()

    def sync(self) -> None:
        return None

    def describe(self) -> str:
        n = sum(t.numel() for t in self.params())
        return f"{n / 1e6:.2f} M params on this rank, {self.rows} rows/rank"

    def _to(self, *ts: torch.Tensor) -> list[torch.Tensor]:
        return [t.to(self.device, non_blocking=True) for t in ts]


def _average(params: list[nn.Parameter], purpose: str, group: Any, size: int) -> None:
    """One blocking all-reduce of every gradient (flattened), divided by ``size``."""
    grads = [q.grad for q in params if q.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    comm.all_reduce(flat, purpose, group)
    flat.div_(size)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


# ---------------------------------------------------------------------------------------------
# tensor parallel


class _CopyToTP(torch.autograd.Function):
    """Megatron's ``f``: identity forward, all-reduce of the gradient in backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous().clone()
        comm.all_reduce(grad, "tp_allreduce", ctx.group)
        return grad, None


class _ReduceFromTP(torch.autograd.Function):
    """Megatron's ``g``: all-reduce of the partial outputs forward, identity backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        x = x.contiguous().clone()
        comm.all_reduce(x, "tp_allreduce", group)
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def tp_groups(world: int, tp: int) -> tuple[list[list[int]], list[list[int]]]:
    """TP groups of ``tp`` consecutive ranks, DP groups of ranks with the same TP index."""
    if tp < 1 or world % tp:
        raise SystemExit(f"traceoverlap-workloads: --tp-size {tp} must divide the world ({world})")
    tps = [list(range(g * tp, (g + 1) * tp)) for g in range(world // tp)]
    dps = [list(range(j, world, tp)) for j in range(tp)]
    return tps, dps


class TensorParallel(ParallelWorkload):
    has_sync = True

    def __init__(self, *a: Any, tp_size: int = 2, **k: Any) -> None:
        super().__init__(*a, **k)
        tps, dps = tp_groups(self.world, tp_size)
        # every rank creates every group, in the same order (new_group is collective)
        tp_pgs = [dist.new_group(r, group_desc=f"tp{i}") for i, r in enumerate(tps)]
        dp_pgs = [dist.new_group(r, group_desc=f"dp{i}") for i, r in enumerate(dps)]
        self.tp, self.tp_rank = tp_size, self.rank % tp_size
        self.dp_size, self.dp_rank = self.world // tp_size, self.rank // tp_size
        self.tp_group, self.dp_group = tp_pgs[self.dp_rank], dp_pgs[self.tp_rank]
        d, h = self.p.mlp_width, 4 * self.p.mlp_width
        if h % tp_size:
            raise SystemExit(f"traceoverlap-workloads: width {h} not divisible by --tp-size")
        hs = h // tp_size
        sl = slice(self.tp_rank * hs, (self.tp_rank + 1) * hs)
        self.layers: list[dict[str, nn.Parameter]] = []
        for _ in range(self.p.mlp_layers):
            fc1, fc2 = nn.Linear(d, h), nn.Linear(h, d)  # the same on every rank (seeded)
            self.layers.append(
                {
                    "w1": nn.Parameter(fc1.weight.detach()[sl].clone().to(self.device)),
                    "b1": nn.Parameter(fc1.bias.detach()[sl].clone().to(self.device)),
                    "w2": nn.Parameter(fc2.weight.detach()[:, sl].clone().to(self.device)),
                    "b2": nn.Parameter(fc2.bias.detach().clone().to(self.device)),
                }
            )
        self.head = nn.Linear(d, MLP_CLASSES).to(self.device)

    def params(self) -> list[nn.Parameter]:
        return [q for layer in self.layers for q in layer.values()] + list(self.head.parameters())

    def load(self, step: int) -> Any:
        return self._to(*_batch(self.p, self.rows, self.dp_size, self.dp_rank, step, self.seed))

    def forward(self, batch: Any) -> Any:
        x, y = batch
        for layer in self.layers:
            h = F.gelu(F.linear(_CopyToTP.apply(x, self.tp_group), layer["w1"], layer["b1"]))
            x = x + _ReduceFromTP.apply(F.linear(h, layer["w2"]), self.tp_group) + layer["b2"]
        return F.cross_entropy(self.head(x), y)

    def sync(self) -> None:
        if self.dp_size > 1:
            _average(self.params(), "dp_allreduce", self.dp_group, self.dp_size)

    def describe(self) -> str:
        return f"tp {self.tp} x dp {self.dp_size}; " + super().describe()


# ---------------------------------------------------------------------------------------------
# pipeline


class Pipeline(ParallelWorkload):
    straggles_inside = frozenset({"forward", "backward"})

    def __init__(self, *a: Any, micro_batches: int = 4, **k: Any) -> None:
        super().__init__(*a, **k)
        d = self.p.mlp_width
        self.micro = micro_batches
        if self.rows % micro_batches:
            raise SystemExit(
                f"traceoverlap-workloads: {self.rows} rows per step do not split into "
                f"{micro_batches} micro-batches (--batch-size)"
            )
        per = max(1, math.ceil(self.p.mlp_layers / self.world))
        full = [nn.Linear(d, d) for _ in range(per * self.world)]  # seeded: same on every rank
        mine: list[nn.Module] = []
        for lin in full[self.rank * per : (self.rank + 1) * per]:
            mine += [lin, nn.ReLU()]
        self.last = self.rank == self.world - 1
        if self.last:
            mine.append(nn.Linear(d, MLP_CLASSES))
        self.stage = nn.Sequential(*mine).to(self.device)

    def params(self) -> list[nn.Parameter]:
        return list(self.stage.parameters())

    def load(self, step: int) -> Any:
        # every stage draws the whole batch: stage 0 uses x, the last stage y
        return self._to(*_batch(self.p, self.rows, 1, 0, step, self.seed))

    def forward(self, batch: Any) -> Any:
        x, y = batch
        mb = self.rows // self.micro
        saved: list[tuple[torch.Tensor, torch.Tensor]] = []
        for k in range(self.micro):
            with span(f"microbatch#{k}"):
                if self.rank == 0:
                    inp = x[k * mb : (k + 1) * mb]
                else:
                    inp = torch.empty(mb, self.p.mlp_width, device=self.device)
                    comm.recv(inp, self.rank - 1, "pp_recv")
                    inp.requires_grad_(True)
                self.straggle("forward")
                out = self.stage(inp)
                if self.last:
                    out = F.cross_entropy(out, y[k * mb : (k + 1) * mb]) / self.micro
                else:
                    comm.send(out.detach().contiguous(), self.rank + 1, "pp_send")
                saved.append((inp, out))
        return saved

    def backward(self, state: Any) -> None:
        for k in reversed(range(self.micro)):
            inp, out = state[k]
            with span(f"microbatch#{k}"):
                if self.last:
                    grad = None
                else:
                    grad = torch.empty_like(out)
                    comm.recv(grad, self.rank + 1, "pp_recv")
                self.straggle("backward")
                out.backward(grad)
                if self.rank > 0:
                    assert inp.grad is not None
                    comm.send(inp.grad.contiguous(), self.rank - 1, "pp_send")

    def describe(self) -> str:
        return (
            f"stage {self.rank} of {self.world}, {self.micro} micro-batches; " + super().describe()
        )


# ---------------------------------------------------------------------------------------------
# FSDP-style


class _ShardedLinear:
    """A Linear whose weight and bias live as one flat parameter, 1/world of it per rank."""

    def __init__(self, lin: nn.Linear, rank: int, world: int, device: torch.device) -> None:
        flat = torch.cat([lin.weight.detach().reshape(-1), lin.bias.detach()])
        self.shapes = (lin.weight.shape, lin.bias.shape)
        self.numel = flat.numel()
        self.per = math.ceil(self.numel / world)
        flat = F.pad(flat, (0, self.per * world - self.numel))
        self.world = world
        self.shard = nn.Parameter(flat[rank * self.per : (rank + 1) * self.per].clone().to(device))

    def gather(self) -> tuple[torch.Tensor, torch.Tensor]:
        full = torch.empty(self.per * self.world, device=self.shard.device)
        comm.all_gather(full, self.shard.detach(), "fsdp_allgather")
        w_n = self.shapes[0].numel()
        return full[:w_n].view(self.shapes[0]), full[w_n : self.numel].view(self.shapes[1])


class _FSDPLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, shard: torch.Tensor, layer: _ShardedLinear) -> Any:
        w, b = layer.gather()
        ctx.save_for_backward(x)
        ctx.layer = layer
        return F.linear(x, w, b)  # the full parameter is dropped here, as FSDP does

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor) -> Any:
        (x,) = ctx.saved_tensors
        layer: _ShardedLinear = ctx.layer
        w, _ = layer.gather()  # gathered again for backward
        gx = gy @ w
        gflat = torch.cat([(gy.t() @ x).reshape(-1), gy.sum(0)])
        gflat = F.pad(gflat, (0, layer.per * layer.world - layer.numel))
        gshard = torch.empty(layer.per, device=gy.device)
        comm.reduce_scatter(gshard, gflat, "fsdp_reduce_scatter")
        return gx, gshard.div_(layer.world), None


class FSDP(ParallelWorkload):
    def __init__(self, *a: Any, **k: Any) -> None:
        super().__init__(*a, **k)
        d = self.p.mlp_width
        lins = [nn.Linear(d, d) for _ in range(self.p.mlp_layers)] + [nn.Linear(d, MLP_CLASSES)]
        self.layers = [_ShardedLinear(lin, self.rank, self.world, self.device) for lin in lins]

    def params(self) -> list[nn.Parameter]:
        return [layer.shard for layer in self.layers]

    def load(self, step: int) -> Any:
        return self._to(*_batch(self.p, self.rows, self.world, self.rank, step, self.seed))

    def forward(self, batch: Any) -> Any:
        x, y = batch
        for i, layer in enumerate(self.layers):
            x = _FSDPLinear.apply(x, layer.shard, layer)
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return F.cross_entropy(x, y)

    def describe(self) -> str:
        return f"{len(self.layers)} sharded layers over {self.world}; " + super().describe()


# ---------------------------------------------------------------------------------------------
# mixture of experts


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, purpose: str) -> torch.Tensor:
        ctx.purpose = purpose
        out = torch.empty_like(x)
        comm.all_to_all(out, x.contiguous(), purpose)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        out = torch.empty_like(grad)
        comm.all_to_all(out, grad.contiguous(), f"{ctx.purpose}_grad")
        return out, None


class MoE(ParallelWorkload):
    has_sync = True

    def __init__(self, *a: Any, **k: Any) -> None:
        super().__init__(*a, **k)
        d = self.p.mlp_width
        self.inp = nn.Linear(d, d)
        self.router = nn.Linear(d, self.world)
        experts = [
            nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
            for _ in range(self.world)
        ]
        self.expert = experts[self.rank]
        self.head = nn.Linear(d, MLP_CLASSES)
        for m in (self.inp, self.router, self.expert, self.head):
            m.to(self.device)
        # each expert takes up to twice its even share of a rank's tokens; the rest are dropped
        self.capacity = max(1, 2 * self.rows // self.world)

    def replicated(self) -> list[nn.Parameter]:
        return [*self.inp.parameters(), *self.router.parameters(), *self.head.parameters()]

    def params(self) -> list[nn.Parameter]:
        return [*self.replicated(), *self.expert.parameters()]

    def load(self, step: int) -> Any:
        return self._to(*_batch(self.p, self.rows, self.world, self.rank, step, self.seed))

    def _slots(self, choice: torch.Tensor) -> torch.Tensor:
        """Token index for each of world x capacity slots (``rows``: an empty slot)."""
        order = torch.argsort(choice, stable=True)
        counts = torch.bincount(choice, minlength=self.world)
        starts = torch.cumsum(counts, 0) - counts
        pos = torch.arange(self.capacity, device=choice.device)
        take = starts[:, None] + pos[None, :]
        valid = pos[None, :] < counts[:, None]
        idx = order[take.clamp(max=self.rows - 1)]
        return torch.where(valid, idx, torch.full_like(idx, self.rows)).reshape(-1)

    def forward(self, batch: Any) -> Any:
        x, y = batch
        h = F.relu(self.inp(x))
        prob = F.softmax(self.router(h), dim=-1)
        gate, choice = prob.max(dim=-1)
        slots = self._slots(choice)
        zero = h.new_zeros(1, h.shape[1])
        dispatched = torch.cat([h, zero])[slots]
        received = _AllToAll.apply(dispatched, "moe_dispatch")
        processed = self.expert(received)
        back = _AllToAll.apply(processed, "moe_combine")
        weight = torch.cat([gate, gate.new_zeros(1)])[slots]
        combined = torch.zeros_like(torch.cat([h, zero])).index_add(
            0, slots, back * weight[:, None]
        )
        return F.cross_entropy(self.head(h + combined[: self.rows]), y)

    def sync(self) -> None:
        _average(self.replicated(), "dp_allreduce", None, self.world)
        # the expert's gradient came back through the all-to-alls from every rank's loss: a sum
        # over ranks, where the replicated layers now hold the mean
        for q in self.expert.parameters():
            if q.grad is not None:
                q.grad.div_(self.world)

    def describe(self) -> str:
        return f"{self.world} experts, capacity {self.capacity}; " + super().describe()


def make_parallel(name: str, *a: Any, tp_size: int = 2, micro_batches: int = 4, **k: Any) -> Any:
    if name == "tp":
        return TensorParallel(*a, tp_size=tp_size, **k)
    if name == "pipeline":
        return Pipeline(*a, micro_batches=micro_batches, **k)
    if name == "fsdp":
        return FSDP(*a, **k)
    if name == "moe":
        return MoE(*a, **k)
    raise ValueError(f"unknown parallel strategy {name!r} (one of {', '.join(PARALLEL)})")
