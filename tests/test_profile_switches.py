"""`traceoverlap profile` passes the workload's model-parallel and planted-cause switches through
(issue 21): --strategy tp|pipeline|fsdp|moe, --tp-size, --micro-batches, --slow-phase, --comm."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import one_error_line

from traceoverlap.cli import main
from traceoverlap.core.errors import UsageError
from traceoverlap.record.workloads import (
    GLOO_LOOPS,
    SLOW_PHASES,
    STRATEGIES,
    ProfileOptions,
    workload_command,
)


def _workload_main() -> Any:
    """The workload's own command line (``traceoverlap_workloads``, torch-free to import)."""
    return pytest.importorskip("traceoverlap_workloads.__main__", reason="workloads not installed")


def _after(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def test_profile_knows_every_strategy_and_phase_of_the_workload() -> None:
    # the workload's own argparse is the reference: every choice it takes, profile takes
    wl = _workload_main()
    choices = {a.dest: tuple(a.choices or ()) for a in wl.build_parser()._actions}
    assert STRATEGIES == choices["strategy"] == wl.STRATEGIES
    assert SLOW_PHASES == choices["slow_phase"] == wl.SLOW_PHASES
    assert GLOO_LOOPS == choices["gloo_loop"]
    help_text = CliRunner().invoke(main, ["profile", "--help"]).output
    for word in ("tp|pipeline|fsdp|moe", "--slow-phase", "--comm [on|off]", "--tp-size"):
        assert word in help_text, word


def test_model_parallel_switches_reach_the_workload_command() -> None:
    opts = ProfileOptions(
        strategy="tp", world_size=4, tp_size=4, slow_rank=3, slow_ms=40, slow_phase="forward"
    )
    cmd = workload_command(opts, Path("o"), python="py")
    assert _after(cmd, "--strategy") == "tp" and _after(cmd, "--tp-size") == "4"
    assert _after(cmd, "--slow-phase") == "forward" and _after(cmd, "--slow-ms") == "40"
    pp = workload_command(
        ProfileOptions(strategy="pipeline", micro_batches=2, comm=False), Path("o"), python="py"
    )
    assert _after(pp, "--micro-batches") == "2" and _after(pp, "--comm") == "off"
    # defaults stay the workload's: no flag at all
    plain = workload_command(ProfileOptions(strategy="moe"), Path("o"), python="py")
    for flag in ("--tp-size", "--micro-batches", "--slow-phase", "--comm"):
        assert flag not in plain
    # every command line profile builds parses with the workload's own parser
    parser = _workload_main().build_parser()
    args = parser.parse_args(cmd[3:])
    assert (args.strategy, args.tp_size, args.slow_phase) == ("tp", 4, "forward")
    assert parser.parse_args(pp[3:]).comm == "off"
    idle = workload_command(ProfileOptions(gloo_loop="idle"), Path("o"), python="py")
    assert _after(idle, "--gloo-loop") == "idle" and "--gloo-loop" not in plain
    assert parser.parse_args(idle[3:]).gloo_loop == "idle"
    with pytest.raises(UsageError, match="unknown gloo loop"):
        ProfileOptions(gloo_loop="spin")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"strategy": "tp", "world_size": 3}, "--tp-size 2 must divide the world size (3)"),
        ({"strategy": "bucketed", "tp_size": 2}, "--tp-size is for --strategy tp"),
        ({"strategy": "tp", "micro_batches": 2}, "--micro-batches is for --strategy pipeline"),
        ({"slow_phase": "forward"}, "give --slow-rank and --slow-ms"),
        ({"strategy": "fsdp", "host_delay_ms": 5.0}, "--host-delay-ms is for the data-parallel"),
        ({"strategy": "ddp", "comm": False, "warmup": 0}, "--warmup >= 1"),
        ({"slow_phase": "sideways", "slow_rank": 1, "slow_ms": 1.0}, "unknown slow phase"),
    ],
)
def test_switches_that_do_not_fit_are_refused_before_running(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ProfileOptions(**kwargs)  # type: ignore[arg-type]


def test_profile_cli_refuses_a_misfit_in_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        main, ["profile", "--strategy", "tp", "-n", "3", "--out", str(tmp_path / "x")]
    )
    assert "must divide the world size (3)" in one_error_line(res)
    assert not (tmp_path / "x").exists()  # refused before anything ran
    res = CliRunner().invoke(main, ["profile", "--comm", "maybe"])
    assert res.exit_code == 2 and "Traceback" not in res.output


@pytest.mark.slow
def test_profile_runs_a_pipeline_without_communication(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="profiling runs a PyTorch workload")
    out = tmp_path / "pp"
    argv = ["profile", "--strategy", "pipeline", "--micro-batches", "2", "--comm", "off"]
    argv += ["--slow-rank", "1", "--slow-ms", "5", "--slow-phase", "forward"]
    argv += ["--steps", "2", "--warmup", "1", "--out", str(out)]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 0, result.output
    names: set[str] = set()
    for r in (0, 1):
        with gzip.open(out / f"rank{r}.json.gz", "rt") as f:
            names |= {str(e.get("name")) for e in json.load(f)["traceEvents"]}
    # the slow stage sleeps in a straggler_sleep range; with --comm off no send/recv was traced
    assert any("straggler_sleep" in n for n in names)
    assert not any(("send" in n.lower() or "recv" in n.lower()) and "gloo" in n for n in names)
