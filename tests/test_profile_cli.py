"""`traceoverlap profile` / `demo`: command construction, the nsys error path, real CPU runs."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceoverlap.cli import main
from traceoverlap.core.errors import TraceoverlapError, UsageError
from traceoverlap.readers.nsys._export import export_command
from traceoverlap.record.workloads import (
    ProfileOptions,
    capture_device,
    find_importer,
    importer_candidates,
    nsys_profile_command,
    run_profile,
    workload_command,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nsys_writer import NsysExport  # noqa: E402


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
    cmd = nsys_profile_command(workload, Path("out/report"), nsys="/opt/nsys", device="cuda")
    assert cmd[:4] == ["/opt/nsys", "profile", "-t", "cuda,nvtx,osrt"]
    assert "--capture-range=cudaProfilerApi" in cmd
    # stop, not the default stop-shutdown, which would kill ranks still finishing their steps
    assert "--capture-range-end=stop" in cmd
    # no CPU sampling: the reader does not use it, and with it nsys 2022.4 can hang at exit
    assert "--sample=none" in cmd and "--cpuctxsw=none" in cmd
    assert "--output=out/report" in cmd
    assert cmd[-len(workload) :] == workload
    # nsys owns CUPTI: the torch profiler must be off in the workload it runs
    assert workload[workload.index("--profiler") + 1] == "none"

    # the one `nsys export` runner of the reader, used by profile too
    export = export_command("nsys", Path("out/report.nsys-rep"), Path("out/report.sqlite"))
    assert export == [
        "nsys",
        "export",
        "--type=sqlite",
        "--force-overwrite=true",
        "--output=out/report.sqlite",
        "out/report.nsys-rep",
    ]


def test_cpu_runs_are_captured_by_the_nvtx_range_around_the_steps() -> None:
    # cudaProfilerApi never triggers without CUDA: on CPU the capture is the workload's
    # traceoverlap:capture NVTX range, and only NVTX is traced.
    workload = workload_command(ProfileOptions(), Path("out"), profiler="none", python="py")
    cmd = nsys_profile_command(workload, Path("out/report"), nsys="nsys", device="cpu")
    assert cmd[:4] == ["nsys", "profile", "-t", "nvtx"]
    assert "--capture-range=nvtx" in cmd and "--nvtx-capture=traceoverlap:capture" in cmd
    assert not any("cudaProfilerApi" in a for a in cmd)
    assert "--capture-range-end=stop" in cmd
    assert capture_device(ProfileOptions(backend="gloo")) == "cpu"
    assert capture_device(ProfileOptions(backend="nccl")) == "cuda"


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def _executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_importer_is_found_along_the_links_to_nsys(tmp_path: Path) -> None:
    # Debian's layout: /usr/bin/nsys -> ../lib/nsight-systems/bin/nsys -> ../target-linux-x64/nsys,
    # where target-linux-x64 is itself a link into /usr/lib/x86_64-linux-gnu/...; the importer is
    # in /usr/lib/nsight-systems/host-linux-x64, beside none of the resolved paths' parents.
    usr = tmp_path / "usr"
    real = _executable(usr / "lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys")
    _link(
        usr / "lib/nsight-systems/target-linux-x64",
        "../x86_64-linux-gnu/nsight-systems/target-linux-x64",
    )
    _link(usr / "lib/nsight-systems/bin/nsys", "../target-linux-x64/nsys")
    _link(usr / "bin/nsys", "../lib/nsight-systems/bin/nsys")
    importer = _executable(usr / "lib/nsight-systems/host-linux-x64/QdstrmImporter")
    assert (usr / "bin/nsys").resolve() == real.resolve()
    assert find_importer(usr / "bin/nsys") == importer
    # NVIDIA's own installs: <root>/bin/nsys (or target-linux-x64/nsys), <root>/host-linux-x64
    root = tmp_path / "opt/nvidia/nsight-systems/2024.1"
    _executable(root / "bin/nsys")
    imp2 = _executable(root / "host-linux-x64/QdstrmImporter")
    assert find_importer(root / "bin/nsys") == imp2
    # nothing beside: None (and the candidates name where it looked)
    lone = _executable(tmp_path / "lone/bin/nsys")
    assert find_importer(lone) is None or find_importer(lone) == Path(
        str(shutil.which("QdstrmImporter"))
    )
    assert tmp_path / "lone/host-linux-x64/QdstrmImporter" in importer_candidates(lone)


# A stand-in nsys: `profile` writes what $FAKE_NSYS_WRITES says next to --output (a .qdstrm, an
# .nsys-rep, or nothing), `export` copies $FAKE_NSYS_EXPORT to --output. Arguments are logged.
FAKE_NSYS = """#!{python}
import os, shutil, sys
args = sys.argv[1:]
open(os.environ["FAKE_NSYS_LOG"], "a").write(" ".join(args) + "\\n")
out = next(a.split("=", 1)[1] for a in args if a.startswith("--output="))
if args[0] == "profile":
    for suffix in filter(None, os.environ.get("FAKE_NSYS_WRITES", "").split(",")):
        open(out + suffix, "wb").write(b"raw capture")
    print("Generated:")
elif args[0] == "export":
    shutil.copy(os.environ["FAKE_NSYS_EXPORT"], out)
"""

FAKE_IMPORTER = """#!{python}
import sys
qdstrm = sys.argv[sys.argv.index("-i") + 1]
open(qdstrm[: -len(".qdstrm")] + ".nsys-rep", "wb").write(b"report")
print("Processing [====100%]")
"""


def _fake_nsys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writes: str, importer: bool
) -> Path:
    bindir = tmp_path / "nsys-install" / "bin"
    _executable(bindir / "nsys", FAKE_NSYS.format(python=sys.executable))
    if importer:
        _executable(
            tmp_path / "nsys-install" / "host-linux-x64" / "QdstrmImporter",
            FAKE_IMPORTER.format(python=sys.executable),
        )
    x = NsysExport()
    x.nvtx(5, 0, 100, "ProfilerStep#1")
    x.nvtx(5, 10, 60, "forward")
    export = x.write(tmp_path / "prepared.sqlite", omit=["CUPTI_ACTIVITY_KIND_KERNEL"])
    log = tmp_path / "nsys.log"
    monkeypatch.setenv("FAKE_NSYS_LOG", str(log))
    monkeypatch.setenv("FAKE_NSYS_WRITES", writes)
    monkeypatch.setenv("FAKE_NSYS_EXPORT", str(export))
    # the stand-in first, and no real QdstrmImporter reachable on PATH
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{Path(sys.executable).parent}")
    # the stand-in never runs the workload: no need for torch here
    monkeypatch.setattr("traceoverlap.record.workloads.check_workloads_runnable", lambda: None)
    return log


def test_a_qdstrm_left_by_nsys_is_imported_with_the_importer_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _fake_nsys(tmp_path, monkeypatch, ".qdstrm", importer=True)
    out = tmp_path / "o"
    traces = run_profile(ProfileOptions(backend="gloo", steps=1), out, nsys=True)
    assert traces == [out / "report.sqlite"]
    assert sorted(p.name for p in out.iterdir()) == ["report.nsys-rep", "report.sqlite"]
    calls = log.read_text().splitlines()
    assert calls[0].startswith("profile -t nvtx --capture-range=nvtx")
    assert calls[1].startswith("export --type=sqlite")


def test_profile_nsys_importer_missing_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_nsys(tmp_path, monkeypatch, ".qdstrm", importer=False)
    out = tmp_path / "o"
    result = CliRunner().invoke(main, ["profile", "--nsys", "--backend", "gloo", "--out", str(out)])
    assert result.exit_code == 2, result.output
    (line,) = [ln for ln in result.output.splitlines() if ln.startswith("traceoverlap: error")]
    assert "QdstrmImporter" in line and "report.qdstrm" in line and "host-linux-x64" in line
    assert "Traceback" not in result.output


def test_profile_nsys_capture_that_produced_nothing_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_nsys(tmp_path, monkeypatch, "", importer=True)
    out = tmp_path / "o"
    result = CliRunner().invoke(main, ["profile", "--nsys", "--backend", "gloo", "--out", str(out)])
    assert result.exit_code == 2, result.output
    (line,) = [ln for ln in result.output.splitlines() if ln.startswith("traceoverlap: error")]
    assert "wrote no report" in line and "traceoverlap:capture" in line
    assert "Traceback" not in result.output


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
    monkeypatch.setattr("traceoverlap.record.workloads.NSYS_RETRY_WAIT_S", 0.0)
    # the stand-in never runs the workload: no need for torch here (the fast loop once needed it,
    # issue 35)
    monkeypatch.setattr("traceoverlap.record.workloads.check_workloads_runnable", lambda: None)
    # tried twice (nsys fails now and then beside another nsys), then one line
    with pytest.raises(TraceoverlapError, match=r"nsys profile failed 2 times \(exit 7\)"):
        run_profile(ProfileOptions(backend="nccl"), tmp_path / "o", nsys=True)
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
@pytest.mark.timeout(900)  # PyTorch workloads: minutes on a busy machine
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
@pytest.mark.timeout(900)  # PyTorch workloads: minutes on a busy machine
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
