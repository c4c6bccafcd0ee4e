"""The ladder of data-parallel gradient synchronisation, from no overlap to DDP.

Every strategy averages gradients over the process group (all-reduce SUM, then divide by the world
size: gloo has no AVG), so all five give the same parameters as single-process training on the
concatenated batch. What differs is *when* communication runs relative to backward:

- ``naive``: after backward, one blocking all-reduce per parameter (no overlap, many small messages).
- ``flat``: after backward, every gradient flattened into one buffer, one all-reduce (no overlap,
  one large message).
- ``overlap``: one async all-reduce per parameter, launched by ``register_post_accumulate_grad_hook``
  as soon as that gradient is final, waited for before the optimizer (overlap, many small messages).
- ``bucketed``: gradients grouped in reverse parameter order into buckets of ``bucket_bytes``; a
  bucket's async all-reduce starts when its last gradient is ready, buckets strictly in order
  (overlap, few medium messages: what DDP does).
- ``ddp``: ``torch.nn.parallel.DistributedDataParallel(bucket_cap_mb=...)``.

Launches run under ``span`` ranges (``allreduce_launch#i bytes=N`` / ``bucket_launch#i bytes=N``) so a
trace shows which message started when, and every wait for a result under ``allreduce_wait#i`` /
``bucket_wait#i``: a CPU trace has no operator for ``Work.wait()``, and these ranges are how the
diagnosis sees that the host was blocked in communication (cause ``dependency``, not ``host``).

``host_delay_s`` (``--host-delay-ms``) plants host-caused exposure: every rank sleeps, in a
``host_delay`` range, after the step's all-reduces were launched and before the host waits for them
or launches the optimizer. Communication still in flight then has nothing to hide behind, while the
host neither waits for it nor has queued the next compute. Where that is (``delay_point``):

- ``overlap`` / ``bucketed``: between ``backward`` (whose hooks launched every all-reduce) and
  ``grad_sync`` (which waits for them): the all-reduces run during the sleep, on gloo and NCCL.
- ``ddp``: after ``backward``. DDP waits for its buckets at the end of backward: on gloo that blocks
  the host until they are done (nothing left in flight: the sleep is pure idle); with NCCL the wait
  is a stream dependency and the kernels run during the sleep. (A comm hook could sleep inside
  backward, but on a CPU timeline the sleep would then lie inside an autograd op: compute.)
- ``naive`` / ``flat``: after ``grad_sync``, before ``optimizer``: the same as ddp, blocking on gloo
  (pure idle), only enqueued with NCCL.

The sleep never synchronises the device (unlike ``--slow-ms``): the GPU drains what was queued and then
sits with only communication, or nothing, to run.

Under Nsight Systems on gloo each collective is also an NVTX range from issue to completion
(``gloo:all_reduce``, see ``instrument``): a CPU run's only record of communication.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch import nn

from . import comm, instrument
from .instrument import comm_begin, comm_end_when_done, span

STRATEGIES = ("naive", "flat", "overlap", "bucketed", "ddp")


class GradSync:
    """Base: ``prepare`` once (may wrap the model), ``sync`` in the ``grad_sync`` phase of each step.

    The training loop calls ``host_delay`` where ``delay_point`` says: "before_sync" between
    ``backward`` and ``grad_sync``, "after_sync" between ``grad_sync`` and ``optimizer``.
    """

    delay_point = "after_sync"

    def __init__(self, world_size: int, host_delay_s: float = 0.0) -> None:
        self.world_size = world_size
        self.host_delay_s = host_delay_s

    def host_delay(self) -> None:
        """Sleep ``host_delay_s`` on the host in a ``host_delay`` range (nothing when 0)."""
        if self.host_delay_s > 0:
            with span("host_delay", color="red"):
                time.sleep(self.host_delay_s)

    def prepare(self, model: nn.Module) -> nn.Module:
        self.params = [p for p in model.parameters() if p.requires_grad]
        return model

    def sync(self) -> None:
        raise NotImplementedError


class Naive(GradSync):
    def sync(self) -> None:
        for i, p in enumerate(self.params):
            assert p.grad is not None
            with span(f"allreduce_launch#{i} bytes={p.grad.numel() * p.grad.element_size()}"):
                handle = comm_begin("all_reduce")
                work = comm.all_reduce_async(p.grad)
                comm_end_when_done(work, handle)
            with span(f"allreduce_wait#{i}"):  # blocking: wait at once
                work.wait()
            p.grad.div_(self.world_size)


class Flat(GradSync):
    def sync(self) -> None:
        grads = [p.grad for p in self.params if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        with span(f"bucket_launch#0 bytes={flat.numel() * flat.element_size()}"):
            handle = comm_begin("all_reduce")
            work = comm.all_reduce_async(flat)
            comm_end_when_done(work, handle)
        with span("bucket_wait#0"):  # blocking: wait at once
            work.wait()
        flat.div_(self.world_size)
        offset = 0
        for g in grads:
            n = g.numel()
            g.copy_(flat[offset : offset + n].view_as(g))
            offset += n


class Overlap(GradSync):
    delay_point = "before_sync"

    def prepare(self, model: nn.Module) -> nn.Module:
        super().prepare(model)
        self.pending: list[tuple[dist.Work, torch.Tensor, int]] = []
        for i, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(self._hook(i))
        return model

    def _hook(self, i: int):  # noqa: ANN202 - a closure over the parameter index
        def launch(p: torch.Tensor) -> None:
            assert p.grad is not None
            with span(f"allreduce_launch#{i} bytes={p.grad.numel() * p.grad.element_size()}"):
                handle = comm_begin("all_reduce")
                work = comm.all_reduce_async(p.grad)
                comm_end_when_done(work, handle)
            self.pending.append((work, p.grad, i))

        return launch

    def sync(self) -> None:
        for work, grad, i in self.pending:
            with span(f"allreduce_wait#{i}"):
                work.wait()
            grad.div_(self.world_size)
        self.pending = []


class Bucketed(GradSync):
    delay_point = "before_sync"

    def __init__(self, world_size: int, bucket_bytes: int, host_delay_s: float = 0.0) -> None:
        super().__init__(world_size, host_delay_s)
        self.bucket_bytes = bucket_bytes

    def prepare(self, model: nn.Module) -> nn.Module:
        super().prepare(model)
        # Reverse parameter order approximates the order backward produces gradients in.
        self.buckets: list[list[nn.Parameter]] = [[]]
        size = 0
        for p in reversed(self.params):
            nbytes = p.numel() * p.element_size()
            if self.buckets[-1] and size + nbytes > self.bucket_bytes:
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(p)
            size += nbytes
        self.bucket_of = {id(p): b for b, ps in enumerate(self.buckets) for p in ps}
        for p in self.params:
            p.register_post_accumulate_grad_hook(self._ready)
        self._reset()
        return model

    def _reset(self) -> None:
        self.missing = [len(ps) for ps in self.buckets]
        self.next_launch = 0
        self.pending: list[tuple[dist.Work, torch.Tensor, int]] = []

    def _ready(self, p: torch.Tensor) -> None:
        self.missing[self.bucket_of[id(p)]] -= 1
        # Launch in bucket order only: every rank must issue the same collectives in the same order.
        while self.next_launch < len(self.buckets) and self.missing[self.next_launch] == 0:
            b = self.next_launch
            grads = [q.grad for q in self.buckets[b]]
            flat = torch.cat([g.reshape(-1) for g in grads if g is not None])
            with span(f"bucket_launch#{b} bytes={flat.numel() * flat.element_size()}"):
                handle = comm_begin("all_reduce")
                work = comm.all_reduce_async(flat)
                comm_end_when_done(work, handle)
            self.pending.append((work, flat, b))
            self.next_launch += 1

    def sync(self) -> None:
        if self.next_launch != len(self.buckets):
            raise RuntimeError("bucketed: some gradients never became ready (unused parameters?)")
        for work, flat, b in self.pending:
            with span(f"bucket_wait#{b}"):
                work.wait()
            flat.div_(self.world_size)
            offset = 0
            for q in self.buckets[b]:
                assert q.grad is not None
                n = q.grad.numel()
                q.grad.copy_(flat[offset : offset + n].view_as(q.grad))
                offset += n
        self._reset()


class DDP(GradSync):
    delay_point = "before_sync"

    def __init__(
        self,
        world_size: int,
        bucket_bytes: int,
        device_ids: list[int] | None,
        host_delay_s: float = 0.0,
    ) -> None:
        super().__init__(world_size, host_delay_s)
        self.bucket_bytes = bucket_bytes
        self.device_ids = device_ids

    def prepare(self, model: nn.Module) -> nn.Module:
        super().prepare(model)
        if not comm.ENABLED:
            # --comm off: the reducer still buckets and copies every gradient, but its hook
            # hands each bucket back unreduced. Construction (a shape check) and the bucket
            # rebuild in the second iteration's forward (a broadcast) still communicate: profile
            # from the third iteration on (--wait + --warmup >= 2, as the fixtures do).
            ddp = nn.parallel.DistributedDataParallel(
                model,
                device_ids=self.device_ids,
                bucket_cap_mb=self.bucket_bytes / 2**20,
                init_sync=False,
            )
            ddp.register_comm_hook(state=None, hook=_no_allreduce)
            return ddp
        ddp = nn.parallel.DistributedDataParallel(
            model, device_ids=self.device_ids, bucket_cap_mb=self.bucket_bytes / 2**20
        )
        if comm.VARIES:
            # --comm alternate: each bucket's hook asks whether this step communicates
            ddp.register_comm_hook(state=None, hook=_allreduce_when_enabled)
            return ddp
        if instrument.marks_comm():
            # Under Nsight Systems on gloo only: DDP's own all-reduce, wrapped to mark each
            # bucket's collective from issue to completion (nothing else records it there).
            ddp.register_comm_hook(state=None, hook=_traced_allreduce)
        return ddp

    def sync(self) -> None:
        # DDP's reducer launched and waited for every bucket inside backward; nothing left to do.
        return None


def _no_allreduce(state, bucket):  # noqa: ANN001, ANN202
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def _allreduce_when_enabled(state, bucket):  # noqa: ANN001, ANN202
    # No annotations (see _traced_allreduce). DDP's own all-reduce in the steps that communicate.
    if not comm.ENABLED:
        return _no_allreduce(state, bucket)
    if instrument.marks_comm():
        return _traced_allreduce(state, bucket)
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    return default_hooks.allreduce_hook(None, bucket)


def _traced_allreduce(state, bucket):  # noqa: ANN001, ANN202
    # No annotations: DDP checks the hook's (evaluated) annotations, which are strings here.
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    handle = comm_begin("all_reduce")
    fut = default_hooks.allreduce_hook(None, bucket)

    def done(f):  # noqa: ANN001, ANN202
        instrument.comm_end(handle)
        return f.value()

    return fut.then(done)


def make_strategy(
    name: str,
    world_size: int,
    bucket_bytes: int,
    device_ids: list[int] | None = None,
    host_delay_s: float = 0.0,
) -> GradSync:
    if name == "naive":
        return Naive(world_size, host_delay_s)
    if name == "flat":
        return Flat(world_size, host_delay_s)
    if name == "overlap":
        return Overlap(world_size, host_delay_s)
    if name == "bucketed":
        return Bucketed(world_size, bucket_bytes, host_delay_s)
    if name == "ddp":
        return DDP(world_size, bucket_bytes, device_ids, host_delay_s)
    raise ValueError(f"unknown strategy {name!r} (one of {', '.join(STRATEGIES)})")
