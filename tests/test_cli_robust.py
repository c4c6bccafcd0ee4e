"""Command-line inputs from the issue-21 campaign that used to end in a traceback or a silent
no-op: each is one clear line and a non-zero exit now."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import one_error_line
from test_cli_analyze import write_trace

from traceoverlap.cli import main


def run(*args: str):  # noqa: ANN201
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize(
    "make",
    [lambda t: str(t / ("x" * 300 + ".json")), lambda t: str(t) + "/a" * 2100 + "/x.json"],
    ids=["name-300", "path-over-4096"],
)
@pytest.mark.parametrize("command", ["analyze", "report", "compare"])
def test_too_long_input_paths_are_one_line(tmp_path: Path, make, command: str) -> None:  # noqa: ANN001
    bad = make(tmp_path)
    args = [command, bad] if command != "compare" else [command, bad, bad]
    if command == "report":
        args += ["-o", str(tmp_path / "r.html")]
    line = one_error_line(run(*args))
    assert "cannot look the path up (File name too long)" in line


def test_bad_scheduler_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    t = str(write_trace(tmp_path / "t.json"))
    for address in ("foo", "tcp://head"):
        line = one_error_line(run("analyze", t, "--scheduler", address))
        assert "expected 'local' or a Dask scheduler address" in line


# --- silent no-ops that are errors now -----------------------------------------------------


@pytest.mark.parametrize("gate", ["", " ", ","])
def test_empty_fail_if_is_an_error(tmp_path: Path, gate: str) -> None:
    # `--fail-if "$GATE"` with GATE unset used to switch the gate off with exit 0
    t = str(write_trace(tmp_path / "t.json"))
    line = one_error_line(run("analyze", t, "--fail-if", gate))
    assert "fail-if: empty condition" in line


def test_empty_comm_pattern_is_an_error(tmp_path: Path) -> None:
    # '' matches every kernel name: every kernel would count as communication
    t = str(write_trace(tmp_path / "t.json"))
    line = one_error_line(run("analyze", t, "--comm-pattern", ""))
    assert "comm_patterns: an empty regex matches every name" in line


def test_huge_invalid_regex_is_echoed_truncated(tmp_path: Path) -> None:
    t = str(write_trace(tmp_path / "t.json"))
    line = one_error_line(run("analyze", t, "--step-regex", "(" * 100_000))
    assert "(100,000 chars)" in line and len(line) < 400 and "step_regex" in line


def test_steps_on_a_trace_without_markers_is_an_error(tmp_path: Path) -> None:
    import json

    t = write_trace(tmp_path / "t.json")
    doc = json.loads(t.read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e["name"] != "ProfilerStep#1"]
    t.write_text(json.dumps(doc))
    line = one_error_line(run("analyze", str(t), "--steps", "3-5"))
    assert f"{t}: steps 3-5 were asked for, but the trace has no step markers" in line
    assert run("analyze", str(t)).exit_code == 0  # without a selection: the 'all' window


def test_same_file_twice_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    t = write_trace(folder / "rank0.json")
    link = tmp_path / "again.json"
    link.symlink_to(t)
    for args in ([str(t), str(t)], [str(folder), str(t)], [str(t), str(link)]):
        line = one_error_line(run("analyze", *args))
        assert "given twice; give each rank file once" in line


def test_step_without_gpu_work_says_why(tmp_path: Path) -> None:
    import json

    t = write_trace(tmp_path / "t.json")
    doc = json.loads(t.read_text())
    for e in doc["traceEvents"]:
        if e["cat"] == "kernel":
            del e["args"]["correlation"]  # no way to tie the kernels to their launches
    t.write_text(json.dumps(doc))
    # the only step launched nothing it can place: no steps at all, and the line says why
    line = one_error_line(run("analyze", str(t)))
    assert "step 1 launched no GPU work (1 marker); skipped; 2 GPU activities of this rank " in line
    assert "have no launch record" in line


def test_empty_redirect_target_in_the_folder_is_skipped(tmp_path: Path) -> None:
    # `analyze . -f json > out.json`: the shell creates out.json (empty) before the run starts
    import os

    from traceoverlap import analyze

    folder = tmp_path / "run"
    folder.mkdir()
    write_trace(folder / "rank0.json")
    out = folder / "out.json"
    out.touch()
    fd = os.open(out, os.O_WRONLY)
    saved = os.dup(1)
    os.dup2(fd, 1)  # our standard output is that file
    try:
        a = analyze(folder)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(fd)
    assert any(n.startswith(f"skipped {out}: empty, created by this run") for n in a.notes)
    assert len(a.steps) == 1


@pytest.mark.parametrize(
    "args,needle",
    [
        (["analyze", "--bogus", "x"], "No such option '--bogus'"),
        (["analyze"], "Missing argument 'PATHS...'"),
        (["analyze", "x", "-f", "yaml"], "'yaml' is not one of"),
        (["nope"], "No such command 'nope'"),
    ],
)
def test_option_errors_are_one_line(args: list[str], needle: str) -> None:
    line = one_error_line(run(*args))
    assert needle in line and "--help`)" in line


def test_double_bom_json_and_bom_toml_are_read(tmp_path: Path) -> None:
    from traceoverlap import analyze

    t = write_trace(tmp_path / "t.json")
    t.write_bytes(b"\xef\xbb\xbf\xef\xbb\xbf" + t.read_bytes())
    # the same numbers as without the marks: one 11 ms step (write_trace's docstring)
    assert analyze(t).steps["step_ns"].tolist() == [11_000_000]
    cfg = tmp_path / "c.toml"
    cfg.write_bytes(b"\xef\xbb\xbf[thresholds]\nlost_ratio = 0.2\n")
    res = run("analyze", str(t), "--config", str(cfg), "-f", "json")
    assert res.exit_code == 0, res.output
    assert '"lost_ratio": 0.2' in res.output


def test_lazy_api_names_are_in_dir() -> None:
    import traceoverlap

    assert {"analyze", "load", "Analysis", "Timeline"} <= set(dir(traceoverlap))


def test_compare_table_fits_its_width() -> None:
    from conftest import WORKLOAD_FIXTURES

    from traceoverlap import analyze
    from traceoverlap.reporters.compare_text import render_table
    from traceoverlap.run.compare import compare

    base, cand = WORKLOAD_FIXTURES / "naive", WORKLOAD_FIXTURES / "bucketed"
    cmp = compare(analyze(base), analyze(cand), baseline_label="b", candidate_label="c")
    for width in (80, 100):
        text = render_table(cmp, width=width)
        # the 'bottleneck changed: ... (steps: ...)' line was 161 columns on these runs
        assert max(len(line) for line in text.splitlines()) <= width
        assert "bottleneck changed" in text


def _kernels_set(tmp_path: Path, field: str, value: object) -> Path:
    import json

    t = write_trace(tmp_path / "t.json")
    doc = json.loads(t.read_text())
    for e in doc["traceEvents"]:
        if e["cat"] == "kernel":
            if field == "dur":
                e["dur"] = value
            else:
                e["args"][field] = value
    t.write_text(json.dumps(doc))
    return t


@pytest.mark.parametrize("dur", [None, "2 ms", [1]])
def test_gpu_run_whose_kernels_all_have_an_unusable_dur_says_so(
    tmp_path: Path, dur: object
) -> None:
    # issue 41: both kernels dropped (dur unusable), then the 2 launches without GPU activity
    # were reported as "the device side was not captured (profile with activities=[CPU, CUDA])"
    line = one_error_line(run("analyze", str(_kernels_set(tmp_path, "dur", dur))))
    assert "all 2 GPU activities (kernel (2)) have an unusable ts/dur" in line, line
    assert "dropped" in line and "not captured" not in line


@pytest.mark.parametrize("corr", [None, "x", [1]])
def test_null_correlations_are_said_in_the_error(tmp_path: Path, corr: object) -> None:
    # issue 41: the error said "(the reader's notes say why)" and showed no note; the reader
    # now counts the 2 kernels with no usable correlation id, and the failed run shows it
    line = one_error_line(run("analyze", str(_kernels_set(tmp_path, "correlation", corr))))
    assert "step 1 launched no GPU work" in line
    assert "the reader noted: 2 kernels have no usable correlation id" in line
