"""Frictions a user hits at the command line (issue 11): every one a single clear line."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import WORKLOAD_FIXTURES, one_error_line
from test_cli_analyze import write_trace

from traceoverlap.cli import main

RUN = WORKLOAD_FIXTURES / "bucketed"


def run(*args: str, env: dict[str, str] | None = None):  # noqa: ANN201
    return CliRunner().invoke(main, list(args), env=env)


@pytest.mark.parametrize(
    "target",
    ["missing-folder/out.json", "x" * 300 + ".json", "/dev/full"],
    ids=["missing-folder", "name-too-long", "disk-full"],
)
def test_unwritable_output_is_one_line(tmp_path: Path, target: str) -> None:
    trace = str(write_trace(tmp_path / "t.json"))
    out = target if target.startswith("/") else str(tmp_path / target)
    line = one_error_line(run("analyze", trace, "-f", "json", "-o", out))
    assert "cannot write the output" in line and out[:40] in line


def test_debug_works_after_the_command_too(tmp_path: Path) -> None:
    # --debug is an option of the group and of each analysing command: both show the traceback
    missing = str(tmp_path / "nope.json")
    for args in (["--debug", "analyze", missing], ["analyze", missing, "--debug"]):
        res = run(*args)
        assert res.exit_code != 0 and res.exception is not None
        assert "TraceFormatError" in type(res.exception).__name__


def test_no_color_is_honoured(tmp_path: Path) -> None:
    from traceoverlap import analyze
    from traceoverlap.reporters.text import render

    a = analyze(write_trace(tmp_path / "t.json"))
    assert "\x1b[" in render(a, color=True)
    import os

    os.environ["NO_COLOR"] = "1"
    try:
        assert "\x1b[" not in render(a, color=True)
    finally:
        del os.environ["NO_COLOR"]


def test_nan_threshold_is_refused(tmp_path: Path) -> None:
    trace = str(write_trace(tmp_path / "t.json"))
    res = run("analyze", trace, "--lost-threshold", "nan")
    assert res.exit_code == 2 and "Traceback" not in res.output


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ('[classify]\ncomm_patterns = "AllGather"\n', "classify.comm_patterns must be a list"),
        ("[classify]\ncomm_patterns = [3]\n", "classify.comm_patterns must be a list"),
        ("[thresholds]\nlost_ratio = 5\n", "thresholds.lost_ratio must be a number between 0"),
        ("[thresholds]\nlost_ratio = -1\n", "thresholds.lost_ratio must be a number between 0"),
        ("[thresholds]\nlost_ratio = true\n", "thresholds.lost_ratio must be a number between 0"),
        ("[thresholds]\nlost_ratio = nan\n", "thresholds.lost_ratio must be a number between 0"),
        ("[steps]\nstep_regex = 7\n", "steps.step_regex must be a regex string"),
        ("[steps]\nstep_regx = 'x'\n", "unknown key steps.step_regx"),
        ("classify = 1\n", "classify must be a [classify] table"),
    ],
)
def test_config_values_of_the_wrong_type(tmp_path: Path, toml: str, needle: str) -> None:
    trace = str(write_trace(tmp_path / "t.json"))
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml)
    line = one_error_line(run("analyze", trace, "--config", str(cfg)))
    assert needle in line and str(cfg) in line


def test_python_api_validates_the_same_values(tmp_path: Path) -> None:
    from traceoverlap import AnalyzeOptions, Thresholds, analyze
    from traceoverlap.core.errors import UsageError

    trace = write_trace(tmp_path / "t.json")
    with pytest.raises(UsageError, match="comm_patterns: expected a list of regexes"):
        analyze(trace, AnalyzeOptions(comm_patterns="AllGather"))  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="lost_ratio: expected a number between 0 and 1"):
        Thresholds(lost_ratio=float("nan"))
    with pytest.raises(UsageError, match="lost_ratio"):
        Thresholds(lost_ratio=True)  # type: ignore[arg-type]


@pytest.mark.parametrize("spec", ["3,4", "3-", "-3", "2-3,4"])
def test_step_selections(spec: str) -> None:
    res = run("analyze", str(RUN), "--steps", spec, "-f", "csv")
    assert res.exit_code == 0, res.output
    steps = sorted({int(line.split(",")[3]) for line in res.output.strip().splitlines()[1:]})
    want = {"3,4": [3, 4], "3-": [3, 4], "-3": [2, 3], "2-3,4": [2, 3, 4]}[spec]
    assert steps == want


def test_step_regex_matching_nothing_lists_the_ranges() -> None:
    line = one_error_line(run("analyze", str(RUN), "--step-regex", "^train_step"))
    assert "matches no range" in line and "'backward'" in line


def test_a_stray_file_in_a_run_folder_is_skipped(tmp_path: Path) -> None:
    # the tool's own earlier output and a config file next to the rank traces: skipped, noted
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(RUN, run_dir)
    res = run("analyze", str(run_dir), "-f", "json", "-o", str(run_dir / "result.json"))
    assert res.exit_code == 0, res.output
    (run_dir / "config.json").write_text('{"lr": 0.1}')
    res = run("analyze", str(run_dir), "-f", "json")
    assert res.exit_code == 0, res.output
    assert "skipped" in res.output and "result.json" in res.output


def test_gpu_run_without_device_activity_is_refused(tmp_path):
    # a GPU run captured with CPU activity only: 150 cudaLaunchKernel calls, backend nccl, no
    # kernel. Read as a CPU run it would be called idle-bound; it is refused in one line that
    # says how to capture the device side, exit 2.
    import json

    ev = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": i * 10, "dur": 5}
        for i in range(5)
    ]
    ev += [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": i * 10 + 1,
            "dur": 2,
            "args": {"correlation": i},
        }
        for i in range(150)
    ]
    path = tmp_path / "nodev.json"
    path.write_text(
        json.dumps(
            {"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2}, "traceEvents": ev}
        )
    )
    res = CliRunner().invoke(main, ["analyze", str(path)])
    assert res.exit_code == 2
    out = res.output.strip()
    assert (
        len(out.splitlines()) == 1 and "no GPU activity" in out and "ProfilerActivity.CUDA" in out
    )
    assert "Traceback" not in out


# --- the config file's own limits (issue 41): one short line naming the file, never a traceback


def _config_error(tmp_path: Path, text: str | bytes) -> str:
    trace = str(write_trace(tmp_path / "t.json"))
    cfg = tmp_path / "c.toml"
    cfg.write_bytes(text.encode() if isinstance(text, str) else text)
    line = one_error_line(run("analyze", trace, "--config", str(cfg)))
    assert line.startswith(f"traceoverlap: error: {cfg}: "), line
    return line


@pytest.mark.parametrize("nest", ["array", "inline-table"])
def test_a_deeply_nested_config_is_one_line(tmp_path: Path, nest: str) -> None:
    # 3,000 levels: the TOML parser recursed past Python's limit (RecursionError traceback)
    depth = 3000
    value = "[" * depth + "]" * depth if nest == "array" else "{a = " * depth + "1" + "}" * depth
    line = _config_error(tmp_path, f"[classify]\ncomm_patterns = {value}\n")
    assert "nested too deeply" in line


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        # a 300,000-character value, key or section was echoed in full
        ("[steps]\nstep_regex = [" + '"x", ' * 60_000 + "]\n", "steps.step_regex must be"),
        ("[steps]\n" + "k" * 300_000 + " = 1\n", "unknown key steps."),
        ("[" + "s" * 300_000 + "]\n", "unknown section "),
        ("[thresholds]\nlost_ratio = '" + "9" * 300_000 + "'\n", "lost_ratio must be"),
    ],
    ids=["value", "key", "section", "string"],
)
def test_config_errors_shorten_what_they_echo(tmp_path: Path, toml: str, needle: str) -> None:
    line = _config_error(tmp_path, toml)
    assert needle in line and len(line) < 400 + len(str(tmp_path)), line[:500]
    assert "chars)" in line or "items)" in line  # says how long it was


@pytest.mark.parametrize(
    "toml",
    ['[steps]\n"a\\nb" = 1\n', '["a\\nb"]\n', '[thresholds]\nlost_ratio = "a\\nb\\u001b[8m"\n'],
    ids=["key", "section", "value"],
)
def test_a_newline_in_a_config_name_stays_on_the_line(tmp_path: Path, toml: str) -> None:
    line = _config_error(tmp_path, toml)  # one_error_line: exactly one line
    assert "\\n" in line and "\x1b" not in line


def test_a_huge_config_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    # a 6 GiB sparse file was read in full (and, under a memory limit, the error blamed the
    # trace): the size is checked first, nothing read
    trace = str(write_trace(tmp_path / "t.json"))
    cfg = tmp_path / "big.toml"
    with cfg.open("wb") as fh:
        fh.truncate(6 << 30)
    import tracemalloc

    tracemalloc.start()
    try:
        line = one_error_line(run("analyze", trace, "--config", str(cfg)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f"{cfg}: config file of 6.0 GiB" in line and "at most 1 MiB" in line, line
    assert peak < 64 << 20  # not read: reading it allocates 6 GiB (or fails)
