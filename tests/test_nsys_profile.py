"""`traceoverlap profile --nsys` for real: Nsight Systems traces 2 gloo ranks on this CPU, and the
export (and the .nsys-rep, through the real `nsys export`) is analysed; the error paths with the
real nsys. Slow (each run profiles a workload); skipped when nsys is not installed, unless
TRACEOVERLAP_REQUIRE_NSYS is set (CI installs it and sets it: a missing nsys fails there)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceoverlap import analyze, load
from traceoverlap.cli import main
from traceoverlap.core.errors import TraceoverlapError
from traceoverlap.record.workloads import ProfileOptions, find_importer, run_profile

# a real profile under nsys: minutes on a busy CI machine, so past the suite's 300 s default
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

NSYS = shutil.which("nsys")
RUN = ["--strategy", "bucketed", "--backend", "gloo", "--world-size", "2", "--preset", "tiny"]
RUN += ["--steps", "2", "--warmup", "1", "--timeout", "240"]


def _need_nsys() -> str:
    if NSYS is None:
        if os.environ.get("TRACEOVERLAP_REQUIRE_NSYS"):
            pytest.fail("TRACEOVERLAP_REQUIRE_NSYS is set but nsys is not on PATH")
        pytest.skip("Nsight Systems (nsys) is not installed")
    pytest.importorskip("torch", reason="profiling runs a PyTorch workload")
    return NSYS


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One real `traceoverlap profile --nsys` run: its folder and its output."""
    _need_nsys()
    out = tmp_path_factory.mktemp("nsys") / "bucketed"
    result = CliRunner().invoke(main, ["profile", "--nsys", *RUN, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out, result.output


def test_profile_nsys_leaves_a_report_and_its_export_and_prints_the_analysis(
    profiled: tuple[Path, str],
) -> None:
    out, output = profiled
    assert sorted(p.name for p in out.iterdir()) == ["report.nsys-rep", "report.sqlite"]
    assert "bottleneck" in output and f"traces: {out}" in output
    assert "no communication activity" not in output  # the workloads mark their collectives


def test_analyze_gives_one_row_per_rank_and_nvtx_step(profiled: tuple[Path, str]) -> None:
    out, _ = profiled
    res = analyze(out / "report.sqlite")
    # 1 wait + 1 warmup iteration run before the capture: ProfilerStep#2 and #3 are captured
    # (step labels are a string column: they also hold "4#2" and "all")
    assert res.steps[["rank", "step"]].values.tolist() == [[0, "2"], [0, "3"], [1, "2"], [1, "3"]]
    assert [(t.rank, t.device_kind, t.rank_source, t.backend) for t in res.traces] == [
        (0, "cpu", "nvtx", "gloo"),
        (1, "cpu", "nvtx", "gloo"),
    ]
    assert (res.steps["compute_ns"] > 0).all() and (res.steps["comm_ns"] > 0).all()
    ev = load(out / "report.sqlite").events
    for t in res.traces:
        phases = ev[
            (ev["rank"] == t.rank)
            & ev["name"].isin(["forward", "backward", "grad_sync", "optimizer"])
        ]
        # each phase once per captured step, as host annotations on the rank's main thread
        assert len(phases) == 8
        assert set(phases["category"].astype(str)) == {"annotation"}
        assert set(phases["tid"]) == {t.pid}
    assert res.collectives is not None
    inst = res.collectives.instances
    assert len(inst) == 16 and inst["matched"].all()  # 8 buckets x 2 steps, on both ranks


def test_the_nsys_rep_is_read_through_the_real_nsys_export(
    profiled: tuple[Path, str], tmp_path: Path
) -> None:
    out, _ = profiled
    rep = tmp_path / "copy.nsys-rep"
    shutil.copyfile(out / "report.nsys-rep", rep)  # no export beside it: nsys must make one
    from_rep = analyze(rep)
    assert (tmp_path / "copy.sqlite").is_file()
    from_sqlite = analyze(out / "report.sqlite")
    cols = ["rank", "step", "step_ns", "compute_ns", "comm_ns", "overlap_ns", "idle_ns"]
    assert from_rep.steps[cols].values.tolist() == from_sqlite.steps[cols].values.tolist()
    assert {t.path for t in from_rep.traces} == {str(rep)}


def test_importer_missing_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real nsys reached through a link to its resolved executable: no host-linux-x64 beside
    # any path on the way, so the .qdstrm nsys leaves cannot be imported.
    real = Path(_need_nsys()).resolve()
    if find_importer(real) is not None:
        pytest.skip(f"an importer is installed beside {real}")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nsys").symlink_to(real)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "o"
    result = CliRunner().invoke(main, ["profile", "--nsys", *RUN, "--out", str(out)])
    assert result.exit_code == 2, result.output
    (line,) = [ln for ln in result.output.splitlines() if ln.startswith("traceoverlap: error")]
    assert "QdstrmImporter" in line and "report.qdstrm" in line
    assert "Traceback" not in result.output


def test_a_run_that_never_opens_the_capture_range_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real nsys around a program that never opens traceoverlap:capture writes no report.
    _need_nsys()
    monkeypatch.setattr(
        "traceoverlap.record.workloads.workload_command",
        lambda *a, **k: [sys.executable, "-c", "print('no steps here')"],
    )
    with pytest.raises(TraceoverlapError, match="wrote no report") as err:
        run_profile(ProfileOptions(backend="gloo", timeout_s=120), tmp_path / "o", nsys=True)
    assert "traceoverlap:capture" in str(err.value)
    assert not list((tmp_path / "o").iterdir())
