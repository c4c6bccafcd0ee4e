"""One rank of a profiled training run: data parallel (strategies.py) or model parallel (parallel.py).

Each iteration ``i`` runs inside ``ProfilerStep#i`` (made by ``torch.profiler``'s ``prof.step()``; an
NVTX range of the same name for Nsight) and its phases ``dataloader`` (the batch is made),
``forward``, ``backward``, ``grad_sync`` (where the strategy has one) and ``optimizer`` are ranges in
both systems (plus ``straggler_sleep`` with ``--slow-ms``: at the start of the ``--slow-phase``
range, or between ``forward`` and ``backward`` for the default ``pre-backward``; ``host_delay`` with
``--host-delay-ms``, see strategies.py). The profiler schedule is ``wait`` then ``warmup`` then
``steps`` active iterations; the active ones are written to ``OUT/rank{r}.json.gz`` and, on a GPU, are
bracketed by cudaProfilerStart/Stop so ``nsys --capture-range=cudaProfilerApi`` captures the same ones.
Under Nsight Systems (``--profiler none``) they are also bracketed by the NVTX range
``traceoverlap:capture`` (what ``nsys --capture-range=nvtx`` starts on for CPU runs, where no CUDA
call ever starts a capture), with a barrier on each side so that every rank is inside the capture
before the first rank opens it and has finished before the first rank closes it (the first end
stops the capture); each rank marks itself ``rank N`` in NVTX.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from . import comm, plant
from .instrument import CAPTURE_RANGE, mark, nvtx_only, span
from .models import PRESETS, build_model, describe, make_batch
from .parallel import PARALLEL, make_parallel
from .strategies import make_strategy

#: Rows per rank per step of the model-parallel workloads (``--batch-size`` overrides).
PARALLEL_ROWS = 64

DTYPES = {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}


def default_bucket_mb(device: torch.device) -> float:
    # The tiny CPU models hold well under 1 MiB of gradients: 25 MiB would make one bucket and hide
    # nothing, so on CPU the default is small enough that several buckets exist.
    return 25.0 if device.type == "cuda" else 0.1


def build_optimizer(
    name: str, params: list[torch.nn.Parameter], lr: float
) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.01)


def run_rank(args: argparse.Namespace, rank: int, world_size: int, local_rank: int) -> None:
    """Train ``args.wait + args.warmup + args.steps`` iterations as ``rank`` and write its trace."""
    backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise SystemExit(
                "traceoverlap-workloads: --backend nccl needs CUDA; use --backend gloo"
            )
        if world_size > torch.cuda.device_count() and "LOCAL_WORLD_SIZE" not in os.environ:
            raise SystemExit(
                f"traceoverlap-workloads: {world_size} ranks but {torch.cuda.device_count()} GPU(s): "
                "NCCL needs one GPU per rank (lower --world-size, or --backend gloo)"
            )
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        if "OMP_NUM_THREADS" not in os.environ:
            # Ranks sharing a CPU each default to every core: oversubscribed, steps get 10x slower
            # and noisy. Split the cores between the local ranks, as torchrun does.
            local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // local))

    dist.init_process_group(
        backend,
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=args.timeout),
        device_id=device if backend == "nccl" else None,
    )
    try:
        if os.environ.get("TRACEOVERLAP_WORKLOADS_FAIL_RANK") == str(rank):
            # For tests of the launcher: this rank dies after joining, the others must not hang.
            raise RuntimeError(
                f"rank {rank}: failing on purpose (TRACEOVERLAP_WORKLOADS_FAIL_RANK)"
            )
        _train(args, rank, world_size, device)
        # Every rank has written all it writes (trace, parameters) before any leaves.
        dist.barrier()
    except BaseException:
        dist.destroy_process_group()
        raise
    # On success the caller ends the process with os._exit (see __main__): gloo's C++ teardown
    # (destroy_process_group, or interpreter finalisation with worker threads still holding work)
    # occasionally aborts with "terminate called without an active exception" on a loaded
    # machine (seen here; cf. pytorch/pytorch#179291), turning a finished run into a failed rank.


class DataParallel:
    """The data-parallel strategies (strategies.py) in the shape the loop drives."""

    straggles_inside: frozenset[str] = frozenset()
    has_sync = True

    def __init__(
        self, args: argparse.Namespace, rank: int, world_size: int, device: torch.device
    ) -> None:
        self.args, self.rank, self.world, self.device = args, rank, world_size, device
        self.preset = PRESETS[args.preset]
        self.seq_len = args.seq_len or self.preset.seq_len
        self.batch = args.batch_size or self.preset.batch_size
        bucket_mb = args.bucket_mb if args.bucket_mb is not None else default_bucket_mb(device)
        self.bucket_mb = bucket_mb
        model = build_model(args.model, self.preset, self.seq_len).to(device)
        self.strategy = make_strategy(
            args.strategy,
            world_size,
            int(bucket_mb * 2**20),
            device_ids=[device.index] if device.type == "cuda" else None,
            host_delay_s=args.host_delay_ms / 1000,
        )
        self.model = self.strategy.prepare(model)
        self.autocast_dtype = DTYPES[args.dtype]

    def params(self) -> list[torch.nn.Parameter]:
        return list(self.model.parameters())

    def load(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = self.args, self.batch
        x, y = make_batch(a.model, self.preset, self.seq_len, b * self.world, i, a.seed)
        x = x[self.rank * b : (self.rank + 1) * b].to(self.device, non_blocking=True)
        y = y[self.rank * b : (self.rank + 1) * b].to(self.device, non_blocking=True)
        return x, y

    def forward(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        dtype = self.autocast_dtype
        with torch.autocast(self.device.type, dtype=dtype, enabled=dtype is not None):
            return self.model(*batch)  # type: ignore[no-any-return]

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def sync(self) -> None:
        self.strategy.sync()

    def describe(self) -> str:
        a = self.args
        return (
            f"{describe(a.model, self.preset, self.model)}; batch {self.batch}/rank"
            + (f", seq {self.seq_len}" if a.model == "gpt" else "")
            + (f", buckets of {self.bucket_mb:g} MiB" if a.strategy in ("bucketed", "ddp") else "")
        )


def build_workload(
    args: argparse.Namespace, rank: int, world_size: int, device: torch.device
) -> Any:
    """The strategy's workload: DataParallel, or one of parallel.py's."""
    torch.manual_seed(args.seed)
    if args.strategy not in PARALLEL:
        return DataParallel(args, rank, world_size, device)
    preset = PRESETS[args.preset]
    rows = args.batch_size or PARALLEL_ROWS
    straggle = make_straggle(args, rank, device)
    return make_parallel(
        args.strategy,
        preset,
        rank,
        world_size,
        device,
        rows,
        args.seed,
        straggle,
        tp_size=args.tp_size,
        micro_batches=args.micro_batches,
    )


#: The loop's current iteration (set before each step): the straggler sleeps only in the planted
#: ones (``--slow-every``, plant.py).
CURRENT_STEP = [0]


def make_straggle(args: argparse.Namespace, rank: int, device: torch.device) -> Any:
    """``straggle(phase)``: rank ``--slow-rank`` sleeps ``--slow-ms`` in a ``straggler_sleep``
    range when ``phase`` is ``--slow-phase`` in a planted iteration (``--slow-every``); every
    other call does nothing."""
    slow = rank == args.slow_rank and args.slow_ms > 0
    every = getattr(args, "slow_every", 1)

    def straggle(phase: str) -> None:
        if slow and phase == args.slow_phase and plant.sleeps_in(CURRENT_STEP[0], every):
            with span("straggler_sleep", color="red"):
                if device.type == "cuda":
                    torch.cuda.synchronize()
                time.sleep(args.slow_ms / 1000)

    return straggle


def _step(
    wl: Any, i: int, straggle: Any, host_delay_s: float, strategy: Any, device: torch.device
) -> None:
    """One iteration: dataloader, forward, backward, grad_sync (where there is one), optimizer."""
    inside = wl.straggles_inside
    with span("dataloader"):
        straggle("dataloader")
        batch = wl.load(i)
    with span("forward"):
        if "forward" not in inside:
            straggle("forward")
        state = wl.forward(batch)
    if host_delay_s > 0:
        # Ranks enter backward together. The delay is where faster ranks would otherwise wait
        # for slower ones (grad_sync), so without this they drift apart by up to the delay, and
        # a faster rank's communication during its sleep becomes waiting for a peer rather than
        # exposure caused by the host. (Before the straggler's sleep: a straggler still makes
        # the others wait inside the all-reduces.)
        comm.barrier("step_barrier")
    straggle("pre-backward")
    with span("backward"):
        if "backward" not in inside:
            straggle("backward")
        wl.backward(state)
    if strategy is not None and strategy.delay_point == "before_sync":
        strategy.host_delay()
    if wl.has_sync:
        with span("grad_sync"):
            wl.sync()
    if strategy is not None and strategy.delay_point == "after_sync":
        strategy.host_delay()
    with span("optimizer"):
        straggle("optimizer")
        wl.opt.step()
        wl.opt.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()


def idle_gloo_loops() -> int:
    """Put this process's gloo TCP loop threads (``gloo_tcp_loop``, one per gloo device: each
    process group that made its own) at SCHED_IDLE (``--gloo-loop idle``); how many. Linux
    only (``/proc/self/task``); 0 elsewhere."""
    n = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0
    for t in tasks:
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                if not f.read().startswith("gloo_tcp_loop"):
                    continue
            os.sched_setscheduler(int(t), os.SCHED_IDLE, os.sched_param(0))
            n += 1
        except (OSError, AttributeError):  # the thread ended, or no SCHED_IDLE here
            continue
    return n


def _train(args: argparse.Namespace, rank: int, world_size: int, device: torch.device) -> None:
    comm.set_enabled(args.comm != "off", varies=args.comm == "alternate")
    wl = build_workload(args, rank, world_size, device)
    wl.opt = build_optimizer(args.optimizer, wl.params(), args.lr)
    strategy = getattr(wl, "strategy", None)
    host_delay_s = strategy.host_delay_s if strategy is not None else 0.0
    straggle = make_straggle(args, rank, device)
    if rank == 0:
        print(
            f"traceoverlap-workloads: {args.strategy} on {world_size} rank(s), "
            f"{dist.get_backend()} on {device.type}"
            + ("" if comm.ENABLED else " (communication off)")
            + (" (communication off in even steps)" if args.comm == "alternate" else "")
            + (
                f" (straggler in steps i % {args.slow_every} == 0)"
                if args.slow_every > 1 and args.slow_ms > 0
                else ""
            )
            + f"; {wl.describe()}",
            file=sys.stderr,
            flush=True,
        )

    total = args.wait + args.warmup + args.steps
    first_active = args.wait + args.warmup
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trace_path = out / f"rank{rank}.json.gz"

    def write_trace(prof: torch.profiler.profile) -> None:
        prof.export_chrome_trace(str(trace_path))

    profiler: torch.profiler.profile | None = None
    if args.profiler == "torch":
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        profiler = torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(
                wait=args.wait, warmup=args.warmup, active=args.steps, repeat=1
            ),
            on_trace_ready=write_trace,
            # input shapes: the overlap tax tells the same op on the same sizes (whatif.md §4)
            record_shapes=True,
        )
        profiler.start()

    if getattr(args, "gloo_loop", "default") == "idle" and dist.get_backend() == "gloo":
        n = idle_gloo_loops()
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
        if rank == 0:
            crowded = (
                f"; warning: {local} ranks on {os.cpu_count()} cores, every core busy with "
                "compute: the loop threads may starve and transfers wait for idle cores"
                if local > (os.cpu_count() or 1)
                else ""
            )
            print(
                f"traceoverlap-workloads: {n} gloo_tcp_loop thread(s) of rank 0 at SCHED_IDLE"
                + crowded,
                file=sys.stderr,
                flush=True,
            )
    under_nsys = args.profiler == "none"
    capture = contextlib.ExitStack()
    step_ms: list[float] = []
    for i in range(total):
        if under_nsys and i == first_active:
            dist.barrier()
            capture.enter_context(nvtx_only(CAPTURE_RANGE, color="cyan"))
        if device.type == "cuda" and i == first_active:
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
        if under_nsys and i == first_active:
            mark(f"rank {rank}")  # inside the capture, for readers that take the rank from it
        CURRENT_STEP[0] = i
        comm.set_enabled(plant.comm_on_in(i, args.comm), varies=args.comm == "alternate")
        planted_marks = plant.marks(
            i, args.slow_every, args.slow_rank >= 0 and args.slow_ms > 0, args.comm
        )
        t0 = time.perf_counter()
        with nvtx_only(f"ProfilerStep#{i}"):
            for m in planted_marks:
                with span(m, color="grey"):
                    pass  # empty: only marks the step (plant.py)
            _step(wl, i, straggle, host_delay_s, strategy, device)
        step_ms.append((time.perf_counter() - t0) * 1e3)
        if under_nsys and i == total - 1:
            dist.barrier()
        if device.type == "cuda" and i == total - 1:
            torch.cuda.profiler.stop()
        if under_nsys and i == total - 1:
            capture.close()
        if profiler is not None:
            profiler.step()
    if profiler is not None:
        profiler.stop()

    # All ranks finish their trace before any leaves: a parent reading the folder sees them all.
    dist.barrier()
    active = step_ms[first_active:]
    if rank == 0:
        where = f"; traces in {out}" if profiler is not None else ""
        print(
            f"traceoverlap-workloads: median step {statistics.median(active):.1f} ms over "
            f"{len(active)} active steps (rank 0, wall clock){where}",
            file=sys.stderr,
            flush=True,
        )
    if args.save_params:
        model = getattr(wl, "model", None)
        state = (
            {n: p.detach().cpu() for n, p in _unwrapped(model).named_parameters()}
            if model is not None
            else {f"param{j}": p.detach().cpu() for j, p in enumerate(wl.params())}
        )
        torch.save(state, out / f"params_rank{rank}.pt")


def _unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def run_reference(args: argparse.Namespace, world_size: int) -> dict[str, torch.Tensor]:
    """Single-process training on the concatenated batch: what every strategy must reproduce."""
    preset = PRESETS[args.preset]
    seq_len = args.seq_len or preset.seq_len
    batch = args.batch_size or preset.batch_size
    torch.manual_seed(args.seed)
    model = build_model(args.model, preset, seq_len)
    opt = build_optimizer(args.optimizer, list(model.parameters()), args.lr)
    for i in range(args.wait + args.warmup + args.steps):
        x, y = make_batch(args.model, preset, seq_len, batch * world_size, i, args.seed)
        model(x, y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return {n: p.detach() for n, p in model.named_parameters()}
