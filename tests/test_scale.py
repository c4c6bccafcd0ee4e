"""Whole runs: the per-rank map in this process, in local processes and on Dask give the same
analysis, byte for byte; step assignment stays linear in the number of steps."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from builders import gpu_timeline
from conftest import WORKLOAD_FIXTURES

from traceoverlap import AnalyzeOptions, analyze
from traceoverlap.reporters.json_report import render

RUN = WORKLOAD_FIXTURES / "bucketed_slow"


def test_local_processes_equal_this_process() -> None:
    assert render(analyze(RUN, AnalyzeOptions(jobs=2))) == render(
        analyze(RUN, AnalyzeOptions(jobs=1))
    )


def test_dask_local_cluster_equals_this_process() -> None:
    pytest.importorskip("dask.distributed", reason="pip install 'traceoverlap[dask]'")
    assert render(analyze(RUN, AnalyzeOptions(scheduler="local", jobs=2))) == render(
        analyze(RUN, AnalyzeOptions(jobs=1))
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_dask_cluster_by_address(tmp_path: Path) -> None:
    # a scheduler and two workers started as separate processes, as on a cluster (SLURM users
    # start them with dask-jobqueue); the analysis connects by address
    pytest.importorskip("dask.distributed", reason="pip install 'traceoverlap[dask]'")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_scheduler",
                "--port",
                str(port),
                "--dashboard-address",
                ":0",
                "--host",
                "127.0.0.1",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        time.sleep(2)
        for _ in range(2):
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "distributed.cli.dask_worker",
                        address,
                        "--nthreads",
                        "1",
                        "--dashboard-address",
                        ":0",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        time.sleep(3)
        # the workers read the rank files themselves: give them a path they can see
        run = tmp_path / "run"
        shutil.copytree(RUN, run)
        assert render(analyze(run, AnalyzeOptions(scheduler=address))) == render(
            analyze(run, AnalyzeOptions(jobs=1))
        )
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


@pytest.mark.slow  # waits for the connection timeout
def test_unreachable_scheduler_is_one_clear_error() -> None:
    pytest.importorskip("dask.distributed", reason="pip install 'traceoverlap[dask]'")
    from traceoverlap.core.errors import UsageError

    with pytest.raises(UsageError, match="cannot connect to the Dask cluster"):
        analyze(RUN, AnalyzeOptions(scheduler=f"tcp://127.0.0.1:{_free_port()}"))


def test_many_steps_are_assigned_in_linear_time() -> None:
    # 4,000 steps of one kernel each: every kernel lands in its own step (structure, not speed:
    # the linear-time claim is measured in benchmarks/bench_scale.py)
    n = 4_000
    kernels = [("k", 7, 100 * i + 10, 100 * i + 20) for i in range(n)]
    steps = [(f"ProfilerStep#{i}", 100 * i, 100 * i + 50) for i in range(n)]
    res = analyze(gpu_timeline(kernels, steps, launch_at=[100 * i + 1 for i in range(n)]))
    assert len(res.steps) == n
    assert (res.steps["compute_ns"].to_numpy() == 10).all()
    assert np.array_equal(res.steps["step"].to_numpy(dtype=np.int64), np.arange(n))
