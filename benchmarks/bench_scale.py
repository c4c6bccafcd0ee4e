"""Benchmark: the analysis stays linear in events, and whole jobs stay bounded in memory.

Run: ``python benchmarks/bench_scale.py [--steps] [--job] [--ranks 64] [--mb 47] [--keep DIR]``.

``--steps``: the same 200,000 kernels cut into 500 steps and into 5,000 steps (one synthetic
GPU trace each); ``traceoverlap analyze`` must cost the same (a quadratic step assignment cost
11.5 s at 3,000 steps per rank before).

``--job``: a whole job of ``--ranks`` rank files of ~``--mb`` MB each, generated from the shared
real A100 trace (repeated with shifted times and renumbered ids, one rank per file, all ranks of
one world), analysed with ``-j 2`` (two local processes) and on a Dask LocalCluster of two
workers: wall time, the driver's peak RSS, and each worker's peak RSS. Memory must be bounded by
the largest rank file (times the workers), not by the job.

Not a test: it takes minutes and its numbers depend on the machine. Each measurement runs in its
own process so that its peak RSS is its own.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
REAL = (
    Path(os.environ.get("TRACEOVERLAP_REAL_TRACES", str(REPO.parent / "shared" / "real-traces")))
    / "kineto"
    / "a100_nccl_allreduce_rank0.json.gz"
)


def _run(cmd: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MB) of the child, stdout."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return wall, rss, proc.stdout


def synthetic_steps(path: Path, n_kernels: int, n_steps: int) -> None:
    """A GPU trace: n_kernels compute kernels (and one NCCL kernel every 20) in n_steps steps."""
    per = n_kernels // n_steps
    events: list[dict[str, Any]] = []
    t = 0.0
    corr = 1
    for s in range(n_steps):
        step_start = t
        for i in range(per):
            nccl = i % 20 == 19
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 1,
                    "tid": 1,
                    "ts": t,
                    "dur": 0.5,
                    "args": {"correlation": corr},
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL" if nccl else "gemm",
                    "pid": 0,
                    "tid": 20 if nccl else 7,
                    "ts": t + 1.0,
                    "dur": 3.0 if nccl else 1.5,
                    "args": {"correlation": corr, "device": 0, "stream": 20 if nccl else 7},
                }
            )
            corr += 1
            t += 2.0
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{s}",
                "pid": 1,
                "tid": 1,
                "ts": step_start,
                "dur": t - step_start,
            }
        )
        t += 5.0
    path.write_text(json.dumps({"traceEvents": events}))


def bench_steps(tmp: Path) -> None:
    print("== the same 200,000 kernels as 500 or 5,000 steps (analyze --format json, one process)")
    print(f"{'steps':>7} {'wall s':>8} {'peak MB':>8}")
    for n_steps in (500, 5_000):
        p = tmp / f"steps{n_steps}.json"
        synthetic_steps(p, 200_000, n_steps)
        wall, rss, _ = _run(
            [
                sys.executable,
                "-m",
                "traceoverlap",
                "analyze",
                str(p),
                "-f",
                "json",
                "-o",
                str(tmp / "out.json"),
            ]
        )
        print(f"{n_steps:>7} {wall:>8.2f} {rss:>8.0f}")


def _shifted(doc: dict[str, Any], k: int, dt_us: float, id_step: int) -> list[dict[str, Any]]:
    out = []
    for ev in doc["traceEvents"]:
        e = dict(ev)
        if "ts" in e and e.get("ph") != "M":
            e["ts"] = round(float(e["ts"]) + k * dt_us, 3)
        args = e.get("args")
        if isinstance(args, dict):
            a = dict(args)
            for key in ("correlation", "External id"):
                if isinstance(a.get(key), int):
                    a[key] = a[key] + k * id_step
            e["args"] = a
        if isinstance(e.get("id"), int):
            e["id"] = e["id"] + k * id_step
        name = e.get("name", "")
        if isinstance(name, str) and name.startswith("ProfilerStep#"):
            e["name"] = f"ProfilerStep#{int(name.split('#')[1]) + 10 * k}"
        out.append(e)
    return out


def make_job(folder: Path, ranks: int, mb: float) -> None:
    with gzip.open(REAL, "rt") as fh:
        doc = json.load(fh)
    evs = [e for e in doc["traceEvents"] if "ts" in e and e.get("ph") != "M"]
    span_us = max(float(e["ts"]) + float(e.get("dur", 0)) for e in evs) - min(
        float(e["ts"]) for e in evs
    )
    one = len(json.dumps(doc)) / 1e6
    reps = max(1, round(mb / one))
    meta = [e for e in doc["traceEvents"] if e.get("ph") == "M"]
    body: list[dict[str, Any]] = []
    for k in range(reps):
        body += _shifted({"traceEvents": evs}, k, span_us + 1000.0, 10_000_000)
    for r in range(ranks):
        out = dict(doc)
        out["traceEvents"] = meta + body
        out["distributedInfo"] = {"backend": "nccl", "rank": r, "world_size": ranks}
        (folder / f"rank{r}.json").write_text(json.dumps(out))
    size = sum(f.stat().st_size for f in folder.iterdir()) / 1e6
    print(f"   {ranks} rank files x {size / ranks:.1f} MB = {size / 1e3:.2f} GB ({reps} repeats)")


DASK_DRIVER = r"""
import resource, sys, time
from dask.distributed import Client, LocalCluster
from traceoverlap import AnalyzeOptions, analyze
from traceoverlap.reporters.json_report import render
if __name__ == "__main__":
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           dashboard_address=None, silence_logs=40)
    client = Client(cluster)
    t0 = time.perf_counter()
    text = render(analyze(sys.argv[1], AnalyzeOptions(scheduler=cluster.scheduler_address)))
    wall = time.perf_counter() - t0
    workers = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    driver = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{wall:.2f} {driver:.0f} " + " ".join(f"{v:.0f}" for v in workers.values()))
    open(sys.argv[2], "w").write(text)
    client.close(); cluster.close()
"""


def bench_job(tmp: Path, ranks: int, mb: float) -> None:
    folder = tmp / "job"
    if not folder.exists():
        folder.mkdir()
        print(f"== generating a {ranks}-rank job")
        make_job(folder, ranks, mb)
    print("== analyze the whole job")
    wall, rss, _ = _run(
        [
            sys.executable,
            "-m",
            "traceoverlap",
            "analyze",
            str(folder),
            "-j",
            "2",
            "-f",
            "json",
            "-o",
            str(tmp / "local.json"),
        ]
    )
    print(f"   -j 2 (local processes): wall {wall:.1f} s, driver + workers peak RSS {rss:.0f} MB")
    script = tmp / "dask_driver.py"
    script.write_text(DASK_DRIVER)
    wall_d, _, out = _run([sys.executable, str(script), str(folder), str(tmp / "dask.json")])
    analysis_s, driver, *workers = out.split()
    print(
        f"   --scheduler (LocalCluster, 2 workers): wall {wall_d:.1f} s (analysis "
        f"{float(analysis_s):.1f} s), driver peak {driver} MB, workers peak "
        f"{', '.join(w + ' MB' for w in workers)}"
    )
    same = (tmp / "local.json").read_bytes() == (tmp / "dask.json").read_bytes()
    print(f"   same JSON from both: {same}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", action="store_true", help="the linear-in-steps benchmark")
    ap.add_argument("--job", action="store_true", help="the whole-job benchmark")
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--mb", type=float, default=47.0, help="MB per rank file")
    ap.add_argument("--keep", type=Path, help="folder for the generated traces (kept)")
    args = ap.parse_args()
    if not (args.steps or args.job):
        args.steps = args.job = True
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="tov-scale-"))
    tmp.mkdir(parents=True, exist_ok=True)
    if args.steps:
        bench_steps(tmp)
    if args.job:
        bench_job(tmp, args.ranks, args.mb)


if __name__ == "__main__":
    main()
