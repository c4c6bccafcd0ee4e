"""``python -m traceoverlap_workloads``: a profiled data-parallel training run, one trace per rank.

Examples::

    python -m traceoverlap_workloads --strategy bucketed --world-size 2 --out runs/bucketed
    python -m traceoverlap_workloads --strategy naive --world-size 2 --slow-rank 1 --slow-ms 20 --out runs/slow
    python -m traceoverlap_workloads --strategy bucketed --host-delay-ms 60 --out runs/host-delay
    python -m traceoverlap_workloads --strategy naive --model mlp --preset comm-heavy --out runs/comm
    torchrun --nproc-per-node 8 -m traceoverlap_workloads --strategy ddp --preset large --out runs/ddp
    python -m traceoverlap_workloads --strategy overlap --comm off --out runs/overlap-commoff
    python -m traceoverlap_workloads --strategy tp --world-size 4 --slow-rank 3 --slow-ms 40 --slow-phase forward --out runs/tp
    python -m traceoverlap_workloads --strategy pipeline --world-size 2 --micro-batches 4 --out runs/pp

``traceoverlap profile`` runs this and then analyzes the traces.
"""

from __future__ import annotations

import argparse
import os
import sys

STRATEGIES = ("naive", "flat", "overlap", "bucketed", "ddp", "tp", "pipeline", "fsdp", "moe")
#: where ``--slow-rank`` sleeps: the start of that phase's range (``pre-backward``: between the
#: ``forward`` and ``backward`` ranges, in neither)
SLOW_PHASES = ("dataloader", "forward", "pre-backward", "backward", "optimizer")
PRESET_NAMES = ("tiny", "small", "medium", "large", "xl", "comm-heavy")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m traceoverlap_workloads",
        description=(
            "Reference data-parallel training with NVTX + torch.profiler ranges for every step and "
            "phase (dataloader, forward, backward, grad_sync, optimizer). Writes OUT/rank{r}.json.gz."
        ),
        epilog=__doc__.split("Examples::", 1)[1].split("``traceoverlap", 1)[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default="bucketed",
        help="data parallel, by gradient synchronisation: naive | flat (after backward, no "
        "overlap) | overlap | bucketed | ddp (during backward); model parallel (an MLP of the "
        "preset's width, --model ignored, see traceoverlap_workloads.parallel): tp (tensor "
        "parallel groups of --tp-size + data parallel) | pipeline (GPipe, a stage per rank) | "
        "fsdp (all-gather before use, reduce-scatter after backward) | moe (all-to-all "
        "dispatch/combine, an expert per rank)",
    )
    p.add_argument(
        "--comm",
        choices=("on", "off", "alternate"),
        default="on",
        help="off: the same program with every communication call skipped (same compute, same "
        "ranges; results are then not averaged): what compute costs without communication "
        "beside it (the overlap tax). ddp still communicates in its first two iterations "
        "(construction, bucket rebuild): keep --wait + --warmup >= 2. alternate: off in the even "
        "iterations (i %% 2 == 0, each opened by an empty planted_step:comm_off range), on in the "
        "odd ones: the overlap tax measured inside one run (traceoverlap_workloads.plant)",
    )
    p.add_argument(
        "--tp-size", type=int, default=2, help="tp: ranks per tensor-parallel group (divides world)"
    )
    p.add_argument("--micro-batches", type=int, default=4, help="pipeline: micro-batches per step")
    p.add_argument("--model", choices=("gpt", "mlp"), default="gpt")
    p.add_argument(
        "--preset",
        choices=PRESET_NAMES,
        default="tiny",
        help="model size (see traceoverlap_workloads.models); tiny runs in seconds on CPU; "
        "comm-heavy: many small gradients and batch 1, so that with naive communication "
        "exceeds compute",
    )
    p.add_argument(
        "--world-size",
        type=int,
        default=2,
        help="ranks to spawn here (ignored under torchrun, which sets WORLD_SIZE)",
    )
    p.add_argument("--out", default="runs/workload", help="folder for rank{r}.json.gz")
    p.add_argument("--steps", type=int, default=5, help="profiled (active) iterations")
    p.add_argument(
        "--warmup", type=int, default=2, help="profiler warmup iterations (run, not recorded)"
    )
    p.add_argument("--wait", type=int, default=1, help="iterations before profiler warmup")
    p.add_argument(
        "--bucket-mb",
        type=float,
        default=None,
        help="bucket size in MiB for bucketed/ddp (default 25 on GPU, 0.1 on CPU)",
    )
    p.add_argument(
        "--batch-size", type=int, default=None, help="per-rank batch (default: preset's)"
    )
    p.add_argument("--seq-len", type=int, default=None, help="tokens per sample (gpt)")
    p.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16"),
        default="float32",
        help="autocast dtype for forward (float32: no autocast)",
    )
    p.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--backend",
        choices=("gloo", "nccl"),
        default=None,
        help="default: nccl when CUDA is available, else gloo",
    )
    p.add_argument(
        "--gloo-loop",
        choices=("default", "idle"),
        default="default",
        help="gloo on CPU: idle runs each rank's gloo TCP loop threads (gloo_tcp_loop) at "
        "SCHED_IDLE once its process groups exist. That thread polls while a transfer is under "
        "way; on a machine with few cores a thread it wakes can wait behind it for a scheduler "
        "tick (4 ms at HZ=250), which makes transfers stall at random "
        "(benchmarks/bench_gloo_latency.py --loop idle). idle: steadier transfers, for what-if "
        "closed loops; the loop then runs only on an otherwise idle core, so communication "
        "beside compute progresses less (not the reference behaviour)",
    )
    p.add_argument(
        "--slow-rank",
        type=int,
        default=-1,
        help="rank that sleeps each step (a straggler: the others wait for it inside their "
        "collectives), in a straggler_sleep range at --slow-phase",
    )
    p.add_argument(
        "--slow-phase",
        choices=SLOW_PHASES,
        default="pre-backward",
        help="where --slow-rank sleeps: at the start of that phase's range (dataloader: before "
        "the batch is made; pipeline forward/backward: in every micro-batch of its stage, after "
        "the recv); pre-backward (default): between forward and backward, in neither range",
    )
    p.add_argument("--slow-ms", type=float, default=0.0, help="how long --slow-rank sleeps (ms)")
    p.add_argument(
        "--slow-every",
        type=int,
        default=1,
        metavar="N",
        help="--slow-rank sleeps only in iterations i with i %% N == 0 (N = 2: the even ones), "
        "each then opened on every rank by an empty planted_step:slow range; the other steps "
        "are the clean measurement of the same run (traceoverlap_workloads.plant). 1: every step",
    )
    p.add_argument(
        "--host-delay-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="every rank sleeps MS ms on the host (a host_delay range) after the step's "
        "all-reduces were launched, before waiting for them and launching the optimizer: "
        "communication in flight is exposed because the host did not feed the device, then the "
        "device idles. overlap/bucketed: between backward and grad_sync; ddp: after backward; "
        "naive/flat: after grad_sync (ddp, naive, flat on gloo: the all-reduces are already done, "
        "pure idle). Each step then starts with a barrier (a step_barrier range) so that ranks "
        "stay in step",
    )
    p.add_argument(
        "--profiler",
        choices=("torch", "none"),
        default="torch",
        help="none: no torch.profiler (under nsys, which owns CUPTI)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds before a stuck collective or the whole run is abandoned",
    )
    p.add_argument(
        "--save-params",
        action="store_true",
        help="also save final parameters as OUT/params_rank{r}.pt (tests)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or args.wait < 0:
        print(
            "traceoverlap-workloads: --steps must be >= 1, --warmup and --wait >= 0",
            file=sys.stderr,
        )
        return 2
    if args.slow_every < 1:
        print("traceoverlap-workloads: --slow-every must be >= 1", file=sys.stderr)
        return 2
    if args.tp_size < 1 or args.micro_batches < 1:
        print("traceoverlap-workloads: --tp-size and --micro-batches must be >= 1", file=sys.stderr)
        return 2
    if args.host_delay_ms > 0 and args.strategy in ("tp", "pipeline", "fsdp", "moe"):
        print(
            "traceoverlap-workloads: --host-delay-ms is for the data-parallel strategies "
            "(naive, flat, overlap, bucketed, ddp); use --slow-ms with --slow-phase",
            file=sys.stderr,
        )
        return 2
    if args.slow_ms < 0 or args.host_delay_ms < 0:
        print("traceoverlap-workloads: --slow-ms and --host-delay-ms must be >= 0", file=sys.stderr)
        return 2
    try:
        import torch  # noqa: F401
    except ImportError:
        print(
            "traceoverlap-workloads: PyTorch is not installed: pip install torch "
            "(the CPU wheel is enough for gloo runs) and nvtx",
            file=sys.stderr,
        )
        return 2

    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        from .train import run_rank

        run_rank(
            args,
            int(os.environ["RANK"]),
            int(os.environ["WORLD_SIZE"]),
            int(os.environ.get("LOCAL_RANK", os.environ["RANK"])),
        )
        # All output is written and every rank passed the final barrier: leave without running
        # the process group's C++ teardown, which can abort after a successful run (train.py).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    if args.world_size < 1:
        print("traceoverlap-workloads: --world-size must be >= 1", file=sys.stderr)
        return 2
    from .launch import spawn

    return spawn(argv, args.world_size, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
