"""Run a reference workload and collect its traces (``traceoverlap profile`` / ``demo``).

The workloads live in the separately installed package ``traceoverlap_workloads`` (the repo's
``workloads/``), which needs PyTorch. This module never imports it (nor torch): it builds command
lines and runs them as subprocesses, so the analyzer stays torch-free.

- Kineto (default): ``python -m traceoverlap_workloads ... --out OUT`` writes ``OUT/rank{r}.json.gz``.
- Nsight Systems (``nsys=True``): the same command under ``nsys profile``, the capture picked by
  device (:func:`nsys_profile_command`): on GPUs ``--capture-range=cudaProfilerApi`` (the workload
  brackets its active steps with cudaProfilerStart/Stop), on CPUs ``--capture-range=nvtx`` on the
  NVTX range :data:`CAPTURE_RANGE` that brackets the same steps. When nsys leaves a raw
  ``.qdstrm`` (Debian's nsight-systems 2022.4 cannot find its importer), the ``QdstrmImporter``
  shipped beside nsys makes the ``.nsys-rep``; then ``nsys export`` (the reader's runner,
  :func:`traceoverlap.readers.nsys._export.run_nsys_export`):
  ``OUT/report.nsys-rep`` and ``OUT/report.sqlite``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core._blas import user_env
from ..core.errors import TraceoverlapError, UsageError
from ..core.vocab import GLOO_LOOPS, SLOW_PHASES

#: data parallel (by gradient synchronisation), then model parallel (workloads/parallel.py)
STRATEGIES = ("naive", "flat", "overlap", "bucketed", "ddp", "tp", "pipeline", "fsdp", "moe")
DATA_PARALLEL = ("naive", "flat", "overlap", "bucketed", "ddp")
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
    ``bucket_mb`` is MiB; ``slow_ms`` is milliseconds ``slow_rank`` sleeps at the start of
    ``slow_phase`` (default: between forward and backward); ``comm`` False runs the same program
    with every communication call skipped (the overlap tax's baseline); ``tp_size`` is the ranks
    of a tensor-parallel group (``tp``), ``micro_batches`` a pipeline step's (``pipeline``);
    ``host_delay_ms`` is milliseconds every rank sleeps on the host after launching the step's
    all-reduces, before waiting for them and the optimizer; ``timeout_s`` bounds a stuck collective
    and the whole run (seconds); ``gloo_loop`` ``"idle"`` runs gloo's TCP loop threads at
    SCHED_IDLE (steadier CPU transfers for what-if closed loops, docs/whatif.md).
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
    slow_phase: str | None = None
    host_delay_ms: float = 0.0
    comm: bool = True
    tp_size: int | None = None
    micro_batches: int | None = None
    timeout_s: float = 600.0
    gloo_loop: str = "default"

    def __post_init__(self) -> None:
        for value, allowed, what in (
            (self.strategy, STRATEGIES, "strategy"),
            (self.model, MODELS, "model"),
            (self.preset, PRESETS, "preset"),
            (self.dtype, DTYPES, "dtype"),
            (self.slow_phase or SLOW_PHASES[0], SLOW_PHASES, "slow phase"),
        ):
            if value not in allowed:
                raise UsageError(f"unknown {what} {value!r} (one of {', '.join(allowed)})")
        if self.backend is not None and self.backend not in BACKENDS:
            raise UsageError(f"unknown backend {self.backend!r} (gloo or nccl)")
        if self.world_size < 1 or self.steps < 1 or self.warmup < 0:
            raise UsageError("--world-size and --steps must be >= 1, --warmup >= 0")
        if self.slow_rank is not None and not 0 <= self.slow_rank < self.world_size:
            raise UsageError(f"--slow-rank {self.slow_rank} is not a rank of {self.world_size}")
        if self.gloo_loop not in GLOO_LOOPS:
            raise UsageError(f"unknown gloo loop {self.gloo_loop!r} (default or idle)")
        if self.host_delay_ms < 0:
            raise UsageError(f"--host-delay-ms must be >= 0, not {self.host_delay_ms:g}")
        self._check_parallel()

    def _check_parallel(self) -> None:
        """The model-parallel switches fit the strategy and the world (the workload would stop
        with the same message, after starting every rank)."""
        if self.host_delay_ms > 0 and self.strategy not in DATA_PARALLEL:
            raise UsageError(
                "--host-delay-ms is for the data-parallel strategies "
                f"({', '.join(DATA_PARALLEL)}); use --slow-ms with --slow-phase"
            )
        if self.tp_size is not None and self.strategy != "tp":
            raise UsageError("--tp-size is for --strategy tp")
        tp = self.tp_size if self.tp_size is not None else 2  # the workload's default
        if self.strategy == "tp" and (tp < 1 or self.world_size % tp):
            raise UsageError(f"--tp-size {tp} must divide the world size ({self.world_size})")
        if self.micro_batches is not None:
            if self.strategy != "pipeline":
                raise UsageError("--micro-batches is for --strategy pipeline")
            if self.micro_batches < 1:
                raise UsageError(f"--micro-batches must be >= 1, not {self.micro_batches}")
        if not self.comm and self.strategy == "ddp" and self.warmup < 1:
            # ddp communicates while it is built and when it rebuilds its buckets: the first two
            # iterations (one unprofiled, --wait, and the warmup) must absorb them
            raise UsageError("--comm off with ddp needs --warmup >= 1 (ddp communicates at first)")
        if self.slow_phase is not None and (self.slow_rank is None or self.slow_ms <= 0):
            raise UsageError(
                "--slow-phase says where --slow-rank sleeps: give --slow-rank and --slow-ms too"
            )


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
        "--tp-size": opts.tp_size,
        "--micro-batches": opts.micro_batches,
    }
    for flag, value in optional.items():
        if value is not None:
            cmd += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    if opts.slow_rank is not None and opts.slow_ms > 0:
        cmd += ["--slow-rank", str(opts.slow_rank), "--slow-ms", f"{opts.slow_ms:g}"]
        if opts.slow_phase is not None:
            cmd += ["--slow-phase", opts.slow_phase]
    if not opts.comm:
        cmd += ["--comm", "off"]
    if opts.host_delay_ms > 0:
        cmd += ["--host-delay-ms", f"{opts.host_delay_ms:g}"]
    if opts.gloo_loop != "default":
        cmd += ["--gloo-loop", opts.gloo_loop]
    cmd += ["--profiler", profiler, "--out", str(out)]
    return cmd


#: The NVTX range the workloads open around their profiled steps (workloads/instrument.py).
CAPTURE_RANGE = "traceoverlap:capture"
#: Seconds ``nsys profile`` may take beyond the workload's own --timeout (start-up, finishing).
NSYS_GRACE_S = 300.0


def nsys_profile_command(
    workload: Sequence[str], report: Path, nsys: str = "nsys", device: str = "cuda"
) -> list[str]:
    """``nsys profile`` around ``workload``, writing ``report`` (.nsys-rep is appended by nsys).

    The capture is picked by device: on GPUs the workload's cudaProfilerStart/Stop
    (``--capture-range=cudaProfilerApi``, tracing CUDA, NVTX and OS runtime calls); on CPUs,
    where no CUDA call ever starts a capture, the NVTX range :data:`CAPTURE_RANGE` around the
    profiled steps (``--capture-range=nvtx``, NVTX only). ``--capture-range-end=stop`` keeps the
    ranks running after the first end (the default, stop-shutdown, would kill them before the
    others reach the end of their steps). CPU sampling and context-switch tracing are off: the
    reader uses neither, and with them Nsight Systems 2022.4 sometimes never exits after the
    program has (seen on this project's CI machines).
    """
    if device == "cuda":
        capture = ["-t", "cuda,nvtx,osrt", "--capture-range=cudaProfilerApi"]
    else:
        capture = ["-t", "nvtx", "--capture-range=nvtx", f"--nvtx-capture={CAPTURE_RANGE}"]
    return [
        nsys,
        "profile",
        *capture,
        "--capture-range-end=stop",
        "--sample=none",
        "--cpuctxsw=none",
        "--force-overwrite=true",
        f"--output={report}",
        *workload,
    ]


def find_nsys() -> str:
    """The ``nsys`` executable on PATH, or a TraceoverlapError saying how to install it."""
    found = shutil.which("nsys")
    if found is None:
        raise TraceoverlapError(
            f"--nsys needs Nsight Systems but `nsys` is not on PATH: {NSYS_INSTALL_HINT}"
        )
    return found


def _link_chain(path: Path) -> list[Path]:
    """``path``, each symlink it goes through, and where it ends (``/usr/bin/nsys`` ->
    ``/usr/lib/nsight-systems/bin/nsys`` -> ... -> the real executable)."""
    chain = [path]
    p = path
    for _ in range(40):
        if not p.is_symlink():
            break
        p = Path(os.path.normpath(p.parent / os.readlink(p)))
        chain.append(p)
    chain.append(path.resolve())
    return list(dict.fromkeys(chain))


def importer_candidates(nsys: str | Path) -> list[Path]:
    """Where the importer that ships with ``nsys`` may be: a ``host-linux-x64`` folder beside or
    above the executable or any symlink on the way to it (NVIDIA's installs and Debian's
    package, whose ``nsys`` resolves to ``target-linux-x64`` while the importer lives in
    ``/usr/lib/nsight-systems/host-linux-x64``)."""
    out: list[Path] = []
    for p in _link_chain(Path(nsys)):
        for root in (p.parent, p.parent.parent):
            out.append(root / "host-linux-x64" / "QdstrmImporter")
    return list(dict.fromkeys(out))


def find_importer(nsys: str | Path) -> Path | None:
    """The ``QdstrmImporter`` that ships with ``nsys``, or None."""
    for c in importer_candidates(nsys):
        if c.is_file() and os.access(c, os.X_OK):
            return c
    on_path = shutil.which("QdstrmImporter")
    return Path(on_path) if on_path else None


def capture_device(opts: ProfileOptions, python: str | None = None) -> str:
    """``"cuda"`` or ``"cpu"``: where the workload will run (it uses NCCL on CUDA, else gloo;
    ``--backend`` decides when given, else whether PyTorch sees a GPU)."""
    if opts.backend == "nccl":
        return "cuda"
    if opts.backend == "gloo":
        return "cpu"
    probe = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)"
    try:
        rc = subprocess.run(
            [python or sys.executable, "-c", probe],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=300,
            check=False,
            env=user_env(),
        ).returncode
    except (OSError, subprocess.TimeoutExpired):
        return "cpu"
    return "cuda" if rc == 0 else "cpu"


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


def _stderr_fd() -> int | None:
    """Our stderr's file descriptor (tools' chatter goes there, not into the analysis on stdout)."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _run(cmd: Sequence[str], what: str) -> None:
    try:
        rc = subprocess.run(list(cmd), check=False, env=user_env()).returncode
    except OSError as exc:
        raise TraceoverlapError(f"could not start {what}: {exc}") from None
    if rc != 0:
        raise TraceoverlapError(f"{what} failed (exit {rc}); its own error is printed above")


def _run_quiet(cmd: Sequence[str], output: Path, cannot_start: str, failed: str) -> None:
    """Run a tool with its output captured (shown only on failure): it must exit 0 and write
    ``output``; otherwise one line, ending with the tool's last line of output."""
    try:
        proc = subprocess.run(
            list(cmd),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=3600,
            check=False,
            env=user_env(),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TraceoverlapError(f"{cannot_start}: {exc}") from None
    if proc.returncode != 0 or not output.is_file():
        lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        last = lines[-1][-300:] if lines else f"exit status {proc.returncode}"
        raise TraceoverlapError(f"{failed}: {last}")


def _kill_session(proc: subprocess.Popen[bytes]) -> None:
    """Stop ``nsys profile`` (started in its own session), everything it started in that
    session, and the profiling agent it started in another one (``--session-name=...-{pid}``)."""
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        proc.wait(timeout=30)
    _kill_agents(proc.pid)


def _kill_agents(pid: int) -> None:
    """Stop the profiling agent ``nsys profile`` (process ``pid``) started in another session
    (``--start-agent --session-name=...-{pid}``): a failed nsys leaves it running."""
    suffix = f"-{pid}".encode()
    proc_dir = Path("/proc")
    if not proc_dir.is_dir():
        return
    for entry in proc_dir.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--start-agent" in args and any(
            a.startswith(b"--session-name=") and a.endswith(suffix) for a in args
        ):
            with contextlib.suppress(OSError):
                os.kill(int(entry.name), signal.SIGKILL)


#: How many times ``nsys profile`` is run when it fails (nsys fails now and then when another
#: nsys runs on the machine: C++ exceptions from its daemon); seconds between tries.
NSYS_ATTEMPTS = 2
NSYS_RETRY_WAIT_S = 3.0


def _run_nsys_profile(cmd: Sequence[str], timeout_s: float) -> None:
    """``nsys profile``, tried again once when it fails; never leaves its agent behind."""
    for attempt in range(1, NSYS_ATTEMPTS + 1):
        rc = _run_nsys_once(cmd, timeout_s)
        if rc == 0:
            return
        if attempt < NSYS_ATTEMPTS:
            print(
                f"traceoverlap: nsys profile failed (exit {rc}); trying again",
                file=sys.stderr,
                flush=True,
            )
            time.sleep(NSYS_RETRY_WAIT_S)
    raise TraceoverlapError(
        f"nsys profile failed {NSYS_ATTEMPTS} times (exit {rc}); its own error is printed above "
        "(another nsys running on this machine can cause it: run again when it has finished)"
    )


def _run_nsys_once(cmd: Sequence[str], timeout_s: float) -> int:
    try:
        proc = subprocess.Popen(
            list(cmd), stdout=_stderr_fd(), start_new_session=True, env=user_env()
        )
    except OSError as exc:
        raise TraceoverlapError(f"could not start nsys profile: {exc}") from None
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_session(proc)
        raise TraceoverlapError(
            f"nsys profile did not finish in {timeout_s:g} s and was stopped (a stuck rank, or "
            "nsys itself): raise --timeout for large presets, or run again"
        ) from None
    except BaseException:
        _kill_session(proc)
        raise
    if rc != 0:
        _kill_agents(proc.pid)
    return rc


def _import_qdstrm(nsys: str, qdstrm: Path) -> None:
    """Turn the raw capture nsys left (when it could not import it itself) into a report."""
    importer = find_importer(nsys)
    if importer is None:
        looked = ", ".join(sorted({str(c.parent) for c in importer_candidates(nsys)}))
        raise TraceoverlapError(
            f"nsys left {qdstrm} but not a report: its importer (QdstrmImporter) is not installed "
            f"with {nsys} (looked in {looked} and on PATH); install the full Nsight Systems "
            f"(with host-linux-x64), or run `QdstrmImporter -i {qdstrm.name}` where it is"
        )
    print(
        f"traceoverlap: nsys did not import its capture itself; importing {qdstrm.name} with "
        f"{importer}",
        file=sys.stderr,
    )
    report = qdstrm.with_suffix(".nsys-rep")
    _run_quiet(
        [str(importer), "-i", str(qdstrm)],
        report,
        f"could not run {importer}",
        f"{importer} could not import {qdstrm}",
    )
    qdstrm.unlink()  # tens of MB of raw capture, now in the report


def _no_capture_error(out: Path, device: str) -> TraceoverlapError:
    if device == "cuda":
        why = (
            "no cudaProfilerStart was reached (the workload calls it at its first profiled step; "
            "did it fail before?)"
        )
    else:
        why = (
            f"the NVTX range {CAPTURE_RANGE} that brackets the profiled steps was never seen "
            "(did the workload fail before its first profiled step, or is its NVTX not "
            "recorded by this nsys?)"
        )
    return TraceoverlapError(f"nsys profile finished but wrote no report in {out}: {why}")


def run_profile(opts: ProfileOptions, out: Path, *, nsys: bool = False) -> list[Path]:
    """Run the workload described by ``opts`` into the folder ``out``; return the trace files.

    Kineto: ``out/rank{r}.json.gz`` for every rank. Nsight: ``out/report.nsys-rep`` and
    ``out/report.sqlite`` (all ranks; returned). The workload's own progress lines go to this
    process's stderr.
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
    rep, qdstrm, sqlite = (report.with_suffix(s) for s in (".nsys-rep", ".qdstrm", ".sqlite"))
    for old in (rep, qdstrm, sqlite):
        old.unlink(missing_ok=True)
    device = capture_device(opts)
    _run_nsys_profile(
        nsys_profile_command(
            workload_command(opts, out, profiler="none"), report, nsys_exe, device
        ),
        opts.timeout_s + NSYS_GRACE_S,
    )
    if not rep.is_file():
        if not qdstrm.is_file():
            raise _no_capture_error(out, device)
        _import_qdstrm(nsys_exe, qdstrm)
    from ..readers.nsys._export import run_nsys_export

    run_nsys_export(nsys_exe, rep, sqlite)
    return [sqlite]
