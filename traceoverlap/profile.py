"""Run a reference workload and collect its traces (``traceoverlap profile`` / ``demo``).

The workloads live in the separately installed package ``traceoverlap_workloads`` (the repo's
``workloads/``), which needs PyTorch. This module never imports it (nor torch): it builds command
lines and runs them as subprocesses, so the analyzer stays torch-free.

- Kineto (default): ``python -m traceoverlap_workloads ... --out OUT`` writes ``OUT/rank{r}.json.gz``.
- Nsight Systems (``nsys=True``): the same command under ``nsys profile -t cuda,nvtx,osrt
  --capture-range=cudaProfilerApi`` (the workload brackets its active steps with
  cudaProfilerStart/Stop), then ``nsys export --type=sqlite``: ``OUT/report.sqlite``.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import TraceoverlapError, UsageError

STRATEGIES = ("naive", "flat", "overlap", "bucketed", "ddp")
MODELS = ("gpt", "mlp")
PRESETS = ("tiny", "small", "medium", "large", "xl", "comm-heavy")
DTYPES = ("float32", "bfloat16", "float16")
BACKENDS = ("gloo", "nccl")

NSYS_INSTALL_HINT = (
    "install NVIDIA Nsight Systems (https://developer.nvidia.com/nsight-systems, or the "
    "nsight-systems-cli package from NVIDIA's CUDA apt/yum repository) and put its bin/ on PATH"
)


@dataclass(frozen=True)
class ProfileOptions:
    """What to run. ``None`` means the workload's default (which depends on CPU vs GPU).

    ``steps`` are profiled (active) iterations, ``warmup`` run-but-unrecorded ones before them;
    ``bucket_mb`` is MiB; ``slow_ms`` is milliseconds ``slow_rank`` sleeps before each backward;
    ``host_delay_ms`` is milliseconds every rank sleeps on the host after launching the step's
    all-reduces, before waiting for them and the optimizer; ``timeout_s`` bounds a stuck collective
    and the whole run (seconds).
    """

    strategy: str = "bucketed"
    model: str = "gpt"
    preset: str = "tiny"
    world_size: int = 2
    steps: int = 5
    warmup: int = 2
    bucket_mb: float | None = None
    batch_size: int | None = None
    seq_len: int | None = None
    dtype: str = "float32"
    backend: str | None = None
    slow_rank: int | None = None
    slow_ms: float = 0.0
    host_delay_ms: float = 0.0
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        for value, allowed, what in (
            (self.strategy, STRATEGIES, "strategy"),
            (self.model, MODELS, "model"),
            (self.preset, PRESETS, "preset"),
            (self.dtype, DTYPES, "dtype"),
        ):
            if value not in allowed:
                raise UsageError(f"unknown {what} {value!r} (one of {', '.join(allowed)})")
        if self.backend is not None and self.backend not in BACKENDS:
            raise UsageError(f"unknown backend {self.backend!r} (gloo or nccl)")
        if self.world_size < 1 or self.steps < 1 or self.warmup < 0:
            raise UsageError("--world-size and --steps must be >= 1, --warmup >= 0")
        if self.slow_rank is not None and not 0 <= self.slow_rank < self.world_size:
            raise UsageError(f"--slow-rank {self.slow_rank} is not a rank of {self.world_size}")
        if self.host_delay_ms < 0:
            raise UsageError(f"--host-delay-ms must be >= 0, not {self.host_delay_ms:g}")


def workload_command(
    opts: ProfileOptions, out: Path, *, profiler: str = "torch", python: str | None = None
) -> list[str]:
    """The ``python -m traceoverlap_workloads`` command line for ``opts``, writing into ``out``."""
    cmd = [python or sys.executable, "-m", "traceoverlap_workloads"]
    cmd += ["--strategy", opts.strategy, "--model", opts.model, "--preset", opts.preset]
    cmd += ["--world-size", str(opts.world_size), "--steps", str(opts.steps)]
    cmd += ["--warmup", str(opts.warmup), "--dtype", opts.dtype, "--timeout", f"{opts.timeout_s:g}"]
    optional = {
        "--bucket-mb": opts.bucket_mb,
        "--batch-size": opts.batch_size,
        "--seq-len": opts.seq_len,
        "--backend": opts.backend,
    }
    for flag, value in optional.items():
        if value is not None:
            cmd += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    if opts.slow_rank is not None and opts.slow_ms > 0:
        cmd += ["--slow-rank", str(opts.slow_rank), "--slow-ms", f"{opts.slow_ms:g}"]
    if opts.host_delay_ms > 0:
        cmd += ["--host-delay-ms", f"{opts.host_delay_ms:g}"]
    cmd += ["--profiler", profiler, "--out", str(out)]
    return cmd


def nsys_profile_command(workload: Sequence[str], report: Path, nsys: str = "nsys") -> list[str]:
    """``nsys profile`` around ``workload``, writing ``report`` (.nsys-rep is appended by nsys).

    ``--capture-range-end=stop`` keeps the ranks running after the first cudaProfilerStop (the
    default, stop-shutdown, would kill them before the others reach the end of their steps).
    """
    return [
        nsys,
        "profile",
        "-t",
        "cuda,nvtx,osrt",
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
        "--force-overwrite=true",
        f"--output={report}",
        *workload,
    ]


def nsys_export_command(report: Path, sqlite: Path, nsys: str = "nsys") -> list[str]:
    """``nsys export`` of ``report`` (an .nsys-rep) to the SQLite file ``sqlite``."""
    return [
        nsys,
        "export",
        "--type=sqlite",
        "--force-overwrite=true",
        f"--output={sqlite}",
        str(report),
    ]


def find_nsys() -> str:
    """The ``nsys`` executable on PATH, or a TraceoverlapError saying how to install it."""
    found = shutil.which("nsys")
    if found is None:
        raise TraceoverlapError(
            f"--nsys needs Nsight Systems but `nsys` is not on PATH: {NSYS_INSTALL_HINT}"
        )
    return found


def check_workloads_runnable() -> None:
    """Fail early, in one line, when the workloads or PyTorch are not installed."""
    if importlib.util.find_spec("traceoverlap_workloads") is None:
        raise TraceoverlapError(
            "the reference workloads are not installed: pip install 'traceoverlap[workloads]' "
            "from a source checkout"
        )
    if importlib.util.find_spec("torch") is None:
        raise TraceoverlapError(
            "profiling runs a PyTorch workload but torch is not installed: pip install torch nvtx "
            "(the CPU wheel is enough for gloo runs)"
        )


def _run(cmd: Sequence[str], what: str) -> None:
    try:
        rc = subprocess.run(list(cmd), check=False).returncode
    except OSError as exc:
        raise TraceoverlapError(f"could not start {what}: {exc}") from None
    if rc != 0:
        raise TraceoverlapError(f"{what} failed (exit {rc}); its own error is printed above")


def run_profile(opts: ProfileOptions, out: Path, *, nsys: bool = False) -> list[Path]:
    """Run the workload described by ``opts`` into the folder ``out``; return the trace files.

    Kineto: ``out/rank{r}.json.gz`` for every rank. Nsight: ``out/report.sqlite`` (all ranks).
    The workload's own progress lines go to this process's stderr.
    """
    nsys_exe = find_nsys() if nsys else None
    check_workloads_runnable()
    out.mkdir(parents=True, exist_ok=True)
    if nsys_exe is None:
        for old in out.glob("rank*.json.gz"):
            old.unlink()
        _run(workload_command(opts, out), "the workload")
        traces = sorted(out.glob("rank*.json.gz"))
        if len(traces) != opts.world_size:
            raise TraceoverlapError(
                f"{out}: expected {opts.world_size} rank trace(s) from the workload, found {len(traces)}"
            )
        return traces
    report = out / "report"
    sqlite = out / "report.sqlite"
    _run(
        nsys_profile_command(workload_command(opts, out, profiler="none"), report, nsys_exe),
        "nsys profile",
    )
    _run(nsys_export_command(out / "report.nsys-rep", sqlite, nsys_exe), "nsys export")
    return [sqlite]
