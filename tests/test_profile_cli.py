"""`traceoverlap profile` / `demo`: command construction, the nsys error path, real CPU runs."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceoverlap.cli import main
from traceoverlap.errors import TraceoverlapError, UsageError
from traceoverlap.profile import (
    ProfileOptions,
    nsys_export_command,
    nsys_profile_command,
    run_profile,
    workload_command,
)


def test_workload_command_passes_every_option_through() -> None:
    opts = ProfileOptions(
        strategy="ddp",
        model="mlp",
        preset="small",
        world_size=4,
        steps=3,
        warmup=1,
        bucket_mb=4.0,
        batch_size=16,
        dtype="bfloat16",
        backend="nccl",
        slow_rank=2,
        slow_ms=20,
        timeout_s=60,
    )
    cmd = workload_command(opts, Path("runs/x"), python="py")
    assert cmd == [
        "py", "-m", "traceoverlap_workloads",
        "--strategy", "ddp", "--model", "mlp", "--preset", "small",
        "--world-size", "4", "--steps", "3", "--warmup", "1", "--dtype", "bfloat16",
        "--timeout", "60",
        "--bucket-mb", "4", "--batch-size", "16", "--backend", "nccl",
        "--slow-rank", "2", "--slow-ms", "20",
        "--profiler", "torch", "--out", "runs/x",
    ]  # fmt: skip


def test_workload_command_leaves_unset_options_to_the_workload() -> None:
    cmd = workload_command(ProfileOptions(), Path("o"), python="py")
    for flag in ("--bucket-mb", "--batch-size", "--seq-len", "--backend", "--slow-rank"):
        assert flag not in cmd


def test_workload_command_passes_the_planted_causes_through() -> None:
    cmd = workload_command(
        ProfileOptions(preset="comm-heavy", host_delay_ms=60.0), Path("o"), python="py"
    )
    assert cmd[cmd.index("--preset") + 1] == "comm-heavy"
    assert cmd[cmd.index("--host-delay-ms") + 1] == "60"
    assert "--host-delay-ms" not in workload_command(ProfileOptions(), Path("o"), python="py")
    with pytest.raises(UsageError, match="--host-delay-ms"):
        ProfileOptions(host_delay_ms=-1.0)


def test_nsys_commands_wrap_the_workload_and_export_sqlite() -> None:
    workload = workload_command(ProfileOptions(), Path("out"), profiler="none", python="py")
    cmd = nsys_profile_command(workload, Path("out/report"), nsys="/opt/nsys")
    assert cmd[:4] == ["/opt/nsys", "profile", "-t", "cuda,nvtx,osrt"]
    assert "--capture-range=cudaProfilerApi" in cmd
    # stop, not the default stop-shutdown, which would kill ranks still finishing their steps
    assert "--capture-range-end=stop" in cmd
    assert "--output=out/report" in cmd
    assert cmd[-len(workload) :] == workload
    # nsys owns CUPTI: the torch profiler must be off in the workload it runs
    assert workload[workload.index("--profiler") + 1] == "none"

    export = nsys_export_command(Path("out/report.nsys-rep"), Path("out/report.sqlite"), "nsys")
    assert export == [
        "nsys",
        "export",
        "--type=sqlite",
        "--force-overwrite=true",
        "--output=out/report.sqlite",
        "out/report.nsys-rep",
    ]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"strategy": "zero"},
        {"preset": "huge"},
        {"world_size": 0},
        {"steps": 0},
        {"slow_rank": 2, "world_size": 2},
        {"backend": "mpi"},
    ],
)
def test_bad_options_are_usage_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(UsageError):
        ProfileOptions(**kwargs)  # type: ignore[arg-type]


def test_profile_nsys_missing_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no nsys anywhere
    result = CliRunner().invoke(main, ["profile", "--nsys", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "nsys" in lines[0] and "not on PATH" in lines[0] and "install" in lines[0]
    assert "Traceback" not in result.output
    assert not (tmp_path / "o").exists()  # failed before running anything


def test_a_failing_nsys_is_reported_with_its_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in nsys that records its arguments and fails: run_profile must have called it with
    # the profile command and must turn its failure into a one-line error.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "nsys"
    fake.write_text(
        f'#!{sys.executable}\nimport sys\nopen({str(tmp_path / "args")!r}, "w").write("\\n".join(sys.argv[1:]))\nsys.exit(7)\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(TraceoverlapError, match=r"nsys profile failed \(exit 7\)"):
        run_profile(ProfileOptions(), tmp_path / "o", nsys=True)
    args = (tmp_path / "args").read_text().splitlines()
    assert args[:3] == ["profile", "-t", "cuda,nvtx,osrt"]
    assert "traceoverlap_workloads" in args


def test_profile_help_teaches_with_examples() -> None:
    result = CliRunner().invoke(main, ["profile", "--help"])
    assert result.exit_code == 0
    assert "traceoverlap profile --strategy bucketed --world-size 2" in result.output
    assert "--nsys" in result.output and "--slow-rank" in result.output
    demo = CliRunner().invoke(main, ["demo", "--help"])
    assert demo.exit_code == 0 and "naive" in demo.output and "bucketed" in demo.output


@pytest.mark.slow
def test_profile_runs_two_cpu_ranks_and_prints_the_analysis(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="profiling runs a PyTorch workload")
    out = tmp_path / "flat"
    result = CliRunner().invoke(
        main,
        ["profile", "--strategy", "flat", "--steps", "2", "--warmup", "1", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.glob("*.json.gz")) == ["rank0.json.gz", "rank1.json.gz"]
    assert "bottleneck" in result.output  # the table header
    assert f"traces: {out}" in result.output


@pytest.mark.slow
def test_demo_profiles_both_strategies_and_writes_reports(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the demo runs a PyTorch workload")
    out = tmp_path / "demo"
    result = CliRunner().invoke(main, ["demo", "--out", str(out)])
    assert result.exit_code == 0, result.output
    for strategy in ("naive", "bucketed"):
        assert len(list((out / strategy).glob("rank*.json.gz"))) == 2
        assert (out / strategy / "report.html").stat().st_size > 0
        assert f"== {strategy}" in result.output
    assert "naive -> bucketed" in result.output
