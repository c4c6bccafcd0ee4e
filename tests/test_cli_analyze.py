"""The analyze command end to end: formats, options, the CI gate, and bad input."""

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceoverlap.cli import main

MS = 1000  # Chrome traces are in microseconds: 1 ms = 1000 us


def write_trace(path: Path, comm_ms: float = 3.0) -> Path:
    """A tiny GPU Kineto trace: one step; gemm [0,10) ms on stream 7, nccl [8, 8+comm) on stream 20.

    compute 10 ms; comm = comm_ms; overlap [8,10) = 2 ms; exposed = comm_ms - 2.
    """
    ev = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 1000,
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 1,
            "dur": 1,
            "args": {"correlation": 1},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 2,
            "dur": 1,
            "args": {"correlation": 2},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "sm80_gemm",
            "pid": 0,
            "tid": 7,
            "ts": 0,
            "dur": 10 * MS,
            "args": {"correlation": 1, "stream": 7, "device": 0},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclKernel_AllReduce_RING_LL_Sum_float",
            "pid": 0,
            "tid": 20,
            "ts": 8 * MS,
            "dur": comm_ms * MS,
            "args": {"correlation": 2, "stream": 20, "device": 0},
        },
    ]
    doc = {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
        "traceEvents": ev,
    }
    path.write_text(json.dumps(doc))
    return path


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_table_default(tmp_path):
    res = run("analyze", str(write_trace(tmp_path / "t.json")))
    assert res.exit_code == 0, res.output
    assert "rank" in res.output and "exposed" in res.output
    assert max(len(line) for line in res.output.splitlines()[1:12]) <= 80


def test_json_schema(tmp_path):
    res = run("analyze", str(write_trace(tmp_path / "t.json")), "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["schema_version"] == 3
    assert {"path", "rank", "world_size", "backend", "format", "device_kind"} <= set(
        doc["traces"][0]
    )
    (step,) = doc["steps"]
    # step = [0, 11) ms = 11 ms; compute 10; comm 3; overlap [8,10) = 2; exposed 1; idle 0;
    # ideal = 11 - 1 + 0 = 10; compute only [0,8) = 8, so the device did not compute for
    # 11 - 8 - 2 = 1 ms = 9.1 % < 10 % of the step -> compute-bound
    assert step["step"] == 1
    assert (step["step_ns"], step["compute_ns"], step["comm_ns"], step["overlap_ns"]) == (
        11_000_000,
        10_000_000,
        3_000_000,
        2_000_000,
    )
    assert (step["exposed_comm_ns"], step["idle_ns"], step["ideal_ns"]) == (
        1_000_000,
        0,
        10_000_000,
    )
    assert step["overlap_ratio"] == pytest.approx(2 / 3)
    assert step["bottleneck"] == "compute-bound" and step["reason"]
    assert "summary" in doc and doc["summary"]["run"]["n_steps"] == 1


def test_csv_and_markdown_and_output_file(tmp_path):
    trace = str(write_trace(tmp_path / "t.json"))
    out = tmp_path / "o.csv"
    assert run("analyze", trace, "-f", "csv", "-o", str(out)).exit_code == 0
    lines = out.read_text().splitlines()
    assert lines[0].startswith("rank,device,pid,step,step_ns") and len(lines) == 2
    md = run("analyze", trace, "-f", "markdown")
    assert md.exit_code == 0 and "| rank | step |" in md.output


def test_fail_if_gate(tmp_path):
    # comm 6 ms: overlap 2, exposed 4 of an 14 ms step -> run exposed_comm_ratio = 4/14 = 0.2857
    trace = str(write_trace(tmp_path / "t.json", comm_ms=6))
    bad = run("analyze", trace, "--fail-if", "exposed_comm_ratio>0.2")
    assert bad.exit_code == 3
    assert "exposed_comm_ratio>0.2" in bad.output and "0.2857" in bad.output
    ok = run("analyze", trace, "--fail-if", "exposed_comm_ratio>0.3,exposed_comm_ns>5ms")
    assert ok.exit_code == 0, ok.output
    wrong = run("analyze", trace, "--fail-if", "nonsense>1")
    assert wrong.exit_code == 2 and "unknown metric" in wrong.output


def test_option_errors_are_one_line(tmp_path):
    trace = str(write_trace(tmp_path / "t.json"))
    for args, needle in (
        (["--steps", "7-3"], "range is empty"),
        (["--steps", "50-60"], "no steps to analyze"),
        (["--rank", "5"], "not in the input"),
        (["--step-regex", "("], "is not a valid regex"),
        (["--comm-pattern", "[x"], "is not a valid regex"),
    ):
        res = run("analyze", trace, *args)
        assert res.exit_code == 2, (args, res.output)
        assert needle in res.output and "Traceback" not in res.output


def test_config_file(tmp_path):
    trace = str(write_trace(tmp_path / "t.json"))
    cfg = tmp_path / "c.toml"
    # lowering the compute-bound threshold to 0 makes the step's 1 ms of exposed communication
    # (its only time not computing) decide: 'exposed-communication'
    cfg.write_text("[thresholds]\nlost_ratio = 0.0\n")
    doc = json.loads(run("analyze", trace, "-f", "json", "--config", str(cfg)).output)
    assert doc["steps"][0]["bottleneck"] == "exposed-communication"
    # the schema-1 keys are gone: the error names the new one
    cfg.write_text("[thresholds]\nexposed_ratio = 0.1\n")
    res = run("analyze", trace, "--config", str(cfg))
    assert res.exit_code == 2 and "thresholds.lost_ratio" in res.output
    cfg.write_text("[nonsense]\nx = 1\n")
    res = run("analyze", trace, "--config", str(cfg))
    assert res.exit_code == 2 and "unknown section" in res.output


@pytest.mark.parametrize(
    "name,content",
    [
        ("empty.json", b""),
        ("truncated.json", b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "a", "ts": 1'),
        ("notjson.json", b"hello world, not a trace"),
        ("noevents.json", b'{"foo": 1}'),
        ("corrupt.json.gz", b"\x1f\x8b\x08\x00garbage"),
        ("random.bin", bytes(range(256))),
    ],
)
def test_bad_input_one_line_exit_2(tmp_path, name, content):
    p = tmp_path / name
    p.write_bytes(content)
    res = CliRunner().invoke(main, ["analyze", str(p)])
    assert res.exit_code == 2, res.output
    err = res.output.strip().splitlines()
    assert len(err) == 1 and name in err[0] and err[0].startswith("traceoverlap: error:")
    assert "Traceback" not in res.output


def test_missing_path_and_empty_folder(tmp_path):
    res = run("analyze", str(tmp_path / "nope.json"))
    assert res.exit_code == 2 and "no such file" in res.output
    res = run("analyze", str(tmp_path))
    assert res.exit_code == 2 and "no trace files" in res.output


def test_gzip_input(tmp_path):
    raw = write_trace(tmp_path / "t.json").read_bytes()
    gz = tmp_path / "rank0.json.gz"
    gz.write_bytes(gzip.compress(raw))
    res = run("analyze", str(gz), "-f", "json")
    assert res.exit_code == 0 and json.loads(res.output)["steps"][0]["comm_ns"] == 3_000_000


def test_every_command_has_help():
    for name, cmd in main.commands.items():
        res = run(name, "--help")
        assert res.exit_code == 0 and len(cmd.help or "") > 40, name
