"""Regenerate ``fixtures/workloads/`` from real CPU (gloo) runs of every strategy.

    python -m traceoverlap_workloads.make_fixtures                  # into <repo>/fixtures/workloads
    python -m traceoverlap_workloads.make_fixtures --only host_delay  # just some
    python -m traceoverlap_workloads.make_fixtures --out DIR
    python -m traceoverlap_workloads.make_fixtures --nsys     # <repo>/fixtures/nsys (needs nsys)

Each run: 2 ranks, 1 wait + 1 warmup + 3 active steps unless it says otherwise, gzipped Kineto
traces ``<name>/rank{r}.json.gz`` (30-120 KB each). One folder per strategy on the tiny GPT, plus runs
with a planted cause (see fixtures/workloads/README.md):

- ``bucketed_slow``: bucketed, rank 1 sleeps 20 ms before each backward (a straggler);
- ``slow_rank``: the same with 40 ms: rank 0 waits for rank 1 inside the all-reduces;
- ``host_delay``: bucketed, every rank sleeps 60 ms on the host between backward and grad_sync
  while its bucket all-reduces are in flight (host-caused exposure, then idle);
- ``comm_heavy``: naive on the ``comm-heavy`` MLP preset: communication exceeds compute;
- model parallel (parallel.py): ``tp_slow`` (4 ranks, rank 3 late in TP group {2,3}),
  ``pipeline``, ``pipeline_slow_last`` (a long last stage), ``fsdp``, ``moe_slow`` (4 ranks);
- what-if pairs, 8 active steps: ``naive_slow`` / ``naive_8``, ``naive4_slow`` / ``naive4`` (4
  ranks), ``overlap_8`` / ``overlap_commoff`` (``--comm off``), ``ddp_8`` / ``ddp_commoff`` and
  ``gpt_overlap_8`` / ``gpt_overlap_commoff`` (input shapes recorded), ``bucketed_idle_slow`` /
  ``bucketed_idle`` and ``ddp_idle_slow`` / ``ddp_idle`` (``--gloo-loop idle``).

Timings differ from run to run; tests on these files assert what the planted cause guarantees.

``--nsys``: ``fixtures/nsys/bucketed_cpu_2rank.sqlite``, the SQLite export that ``traceoverlap profile
--nsys`` makes of ``bucketed`` on 2 gloo ranks (1 wait + 1 warmup + 2 captured steps).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .strategies import STRATEGIES

COMMON = ["--world-size", "2", "--steps", "3", "--warmup", "1", "--wait", "1"]
TINY = ["--preset", "tiny"]
RUNS: dict[str, list[str]] = {s: ["--strategy", s, *TINY] for s in STRATEGIES}
RUNS["bucketed_slow"] = ["--strategy", "bucketed", *TINY, "--slow-rank", "1", "--slow-ms", "20"]
RUNS["slow_rank"] = ["--strategy", "bucketed", *TINY, "--slow-rank", "1", "--slow-ms", "40"]
RUNS["host_delay"] = ["--strategy", "bucketed", *TINY, "--host-delay-ms", "60"]
RUNS["comm_heavy"] = ["--strategy", "naive", "--model", "mlp", "--preset", "comm-heavy"]
# Model-parallel runs (parallel.py); the last --world-size / --steps given wins over COMMON's.
SLOW_FORWARD = ["--slow-phase", "forward"]
RUNS["tp_slow"] = ["--strategy", "tp", "--world-size", "4", "--slow-rank", "3", "--slow-ms", "40"]
RUNS["tp_slow"] += SLOW_FORWARD
RUNS["pipeline"] = ["--strategy", "pipeline"]
RUNS["pipeline_slow_last"] = ["--strategy", "pipeline", "--slow-rank", "1", "--slow-ms", "10"]
RUNS["pipeline_slow_last"] += SLOW_FORWARD
# 4 stages in the world group: the peer of each send / recv is known only from what the trace
# records (c10d::send / c10d::recv_ Concrete Inputs, diagnosis.md §6)
RUNS["pipeline4"] = ["--strategy", "pipeline", "--world-size", "4"]
RUNS["fsdp"] = ["--strategy", "fsdp"]
RUNS["moe_slow"] = ["--strategy", "moe", "--world-size", "4", "--slow-rank", "2", "--slow-ms", "30"]
RUNS["moe_slow"] += SLOW_FORWARD
# a straggler after its step's last collective: it starts its next step late
RUNS["ddp_optimizer_slow"] = ["--strategy", "ddp", "--model", "mlp", "--slow-rank", "1"]
RUNS["ddp_optimizer_slow"] += ["--slow-ms", "30", "--slow-phase", "optimizer"]
# What-if closed-loop pairs (whatif.md §5): 8 active steps, the same run with and without the
# cause. The tiny MLP keeps 8 steps of 2 ranks small.
EIGHT = ["--steps", "8"]
NAIVE = ["--strategy", "naive", "--model", "mlp", "--batch-size", "512", *EIGHT]
RUNS["naive_8"] = NAIVE
RUNS["naive_slow"] = [*NAIVE, "--slow-rank", "1", "--slow-ms", "40"]
# no-straggler needs 4 or more ranks (whatif.md §5); the baseline is made right after the slow run
RUNS["naive4_slow"] = [*NAIVE, "--world-size", "4", "--slow-rank", "1", "--slow-ms", "40"]
RUNS["naive4"] = [*NAIVE, "--world-size", "4"]
OVERLAP = ["--strategy", "overlap", "--model", "mlp", "--batch-size", "512", *EIGHT]
RUNS["overlap_8"] = OVERLAP
RUNS["overlap_commoff"] = [*OVERLAP, "--comm", "off"]
# the overlap tax's closed loop on runs with input shapes (record_shapes: the tax's "same op",
# whatif.md §4), the default GPT: DDP (its last layers' backward runs before the first bucket is
# ready: alone instances exist) and per-parameter overlap (every backward op beside communication)
RUNS["ddp_8"] = ["--strategy", "ddp", *EIGHT]
RUNS["ddp_commoff"] = ["--strategy", "ddp", *EIGHT, "--comm", "off"]
# fix-rank's closed loop on the asynchronous strategies (whatif.md §5), gloo's TCP loop threads at
# SCHED_IDLE (--gloo-loop idle: without it a thread the loop wakes can wait a scheduler tick
# behind it, and the transfers of a slow run and its rerun differ by more than the tolerance);
# each baseline made right after its slow run
IDLE = [*EIGHT, "--gloo-loop", "idle"]
RUNS["bucketed_idle_slow"] = [
    "--strategy",
    "bucketed",
    *IDLE,
    "--slow-rank",
    "1",
    "--slow-ms",
    "40",
]
RUNS["bucketed_idle"] = ["--strategy", "bucketed", *IDLE]
RUNS["ddp_idle_slow"] = ["--strategy", "ddp", *IDLE, "--slow-rank", "0", "--slow-ms", "25"]
RUNS["ddp_idle_slow"] += ["--slow-phase", "optimizer"]
RUNS["ddp_idle"] = ["--strategy", "ddp", *IDLE]
RUNS["gpt_overlap_8"] = ["--strategy", "overlap", *EIGHT]
RUNS["gpt_overlap_commoff"] = ["--strategy", "overlap", *EIGHT, "--comm", "off"]


NSYS_FIXTURE = "bucketed_cpu_2rank.sqlite"
NSYS_RUN = ["--strategy", "bucketed", "--backend", "gloo", "--world-size", "2", "--preset", "tiny"]
NSYS_RUN += ["--steps", "2", "--warmup", "1"]


def default_out(kind: str = "workloads") -> Path:
    repo = Path(__file__).resolve().parents[1]
    if (repo / "pyproject.toml").is_file():
        return repo / "fixtures" / kind
    raise SystemExit("make_fixtures: not in a source checkout; pass --out DIR")


def make_nsys_fixture(out: Path) -> int:
    """Profile under Nsight Systems with ``traceoverlap profile --nsys`` and keep its export."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "traceoverlap", "profile", "--nsys", *NSYS_RUN, "--out", tmp]
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL).returncode
        if rc != 0:
            print(f"make_fixtures: nsys run failed (exit {rc})", file=sys.stderr)
            return rc
        target = out / NSYS_FIXTURE
        shutil.copyfile(Path(tmp) / "report.sqlite", target)
    size = target.stat().st_size / 1024
    print(
        f"make_fixtures: {target} {size:.0f} KB ({time.perf_counter() - t0:.1f} s)", file=sys.stderr
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m traceoverlap_workloads.make_fixtures")
    ap.add_argument("--out", type=Path, default=None, help="default: <repo>/fixtures/workloads")
    ap.add_argument("--only", nargs="*", choices=sorted(RUNS), help="regenerate just these")
    ap.add_argument("--nsys", action="store_true", help="the Nsight Systems fixture instead")
    args = ap.parse_args(argv)
    if args.nsys:
        return make_nsys_fixture(args.out or default_out("nsys"))
    out = args.out or default_out()
    for name in args.only or list(RUNS):
        target = out / name
        for old in target.glob("rank*.json.gz"):
            old.unlink()
        cmd = [
            sys.executable,
            "-m",
            "traceoverlap_workloads",
            *COMMON,
            *RUNS[name],
            "--out",
            str(target),
        ]
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, check=False).returncode
        if rc != 0:
            print(f"make_fixtures: {name} failed (exit {rc})", file=sys.stderr)
            return rc
        sizes = ", ".join(
            f"{p.name} {p.stat().st_size / 1024:.0f} KB"
            for p in sorted(target.glob("rank*.json.gz"))
        )
        print(f"make_fixtures: {name}: {sizes} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
