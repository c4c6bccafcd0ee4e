"""The what-if scenarios come from one registry (traceoverlap/whatif/registry.py): the parser,
the "unknown scenario" error, `whatif --help` and the default list read it, so a scenario
registered here (no other file touched) runs end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from traceoverlap.cli import main
from traceoverlap.core.errors import UsageError
from traceoverlap.whatif import registry
from traceoverlap.whatif.graph import RunGraph
from traceoverlap.whatif.registry import FACTOR, Changed, Scenario, always, register, run_ranks
from traceoverlap.whatif.replay import Params

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "workloads"
NAIVE = str(FIXTURES / "naive")


def _all_hidden(g: RunGraph, p: Params, arg: str, tax: Any) -> Params:
    from traceoverlap.whatif.transforms import comm_scaled, every_node

    return comm_scaled(g, p, every_node(g), float("inf"))


def _slower(g: RunGraph, p: Params, arg: str, tax: Any) -> Params:
    from traceoverlap.whatif.transforms import comm_scaled, every_node

    return comm_scaled(g, p, every_node(g), 1 / float(arg))


ALL_HIDDEN = Scenario(
    "all-comm-hidden",
    help="every collective's transfers delay nothing",
    apply=_all_hidden,
    changed=lambda g, arg: Changed("every transfer delays nothing", run_ranks(g)),
    defaults=always,
)
SLOWER = Scenario(
    "comm-slower",
    param=FACTOR,
    help="every transfer F times slower",
    apply=_slower,
    changed=lambda g, arg: Changed(f"every transfer {arg}x slower", run_ranks(g)),
)


@pytest.fixture
def scenarios(monkeypatch: pytest.MonkeyPatch) -> None:
    """The built-in registry and two more, for this test only."""
    monkeypatch.setattr(registry, "SCENARIOS", dict(registry.SCENARIOS))
    register(ALL_HIDDEN)
    register(SLOWER)


def test_the_built_in_order_is_the_listed_order() -> None:
    assert registry.spellings() == [
        "replay",
        "no-straggler",
        "ideal",
        "fix-rank:R",
        "hide:FAMILY",
        "comm-speed:F",
        "no-host-gaps",
        "no-overlap-tax",
    ]
    assert str(registry.unknown_scenario("nope")) == (
        "unknown scenario 'nope': use replay, no-straggler, ideal, fix-rank:R, hide:FAMILY, "
        "comm-speed:F, no-host-gaps or no-overlap-tax"
    )


@pytest.mark.usefixtures("scenarios")
def test_the_registry_drives_the_help_the_parser_and_the_error() -> None:
    help_text = CliRunner().invoke(main, ["whatif", "--help"]).output
    flat = "".join(help_text.split())  # click wraps the help at blanks and dashes
    # the --scenario help and the Scenarios section list the new ones, after the built-ins
    assert "no-overlap-tax,all-comm-hidden,comm-slower:F(repeatable;" in flat
    assert "all-comm-hiddeneverycollective'stransfersdelaynothing" in flat
    assert "comm-slower:FeverytransferFtimesslower" in flat
    assert registry.parse("comm-slower:1.5") == (SLOWER, "1.5")
    assert registry.parse("all-comm-hidden") == (ALL_HIDDEN, "")
    # its parameter decides what it takes and what is checked against the run
    for bad in ("comm-slower", "comm-slower:x", "all-comm-hidden:2"):
        with pytest.raises(UsageError, match="or comm-slower:F$"):
            registry.parse(bad)
    res = CliRunner().invoke(main, ["whatif", NAIVE, "--scenario", "nope"])
    assert res.exit_code == 2
    assert (
        "use replay, no-straggler, ideal, fix-rank:R, hide:FAMILY, comm-speed:F, no-host-gaps, "
        in (res.output)
    )
    assert "no-overlap-tax, all-comm-hidden or comm-slower:F" in res.output
    res = CliRunner().invoke(main, ["whatif", NAIVE, "--scenario", "comm-slower:0"])
    assert res.exit_code == 2 and "scenario comm-slower:0: the factor must be > 0" in res.output


@pytest.mark.usefixtures("scenarios")
def test_a_registered_scenario_runs_end_to_end() -> None:
    # naive's only collective family is AllReduce: hiding every transfer is hiding AllReduce
    args = ["whatif", NAIVE, "--format", "json"]
    asked = ["--scenario", "all-comm-hidden", "--scenario", "hide:AllReduce"]
    doc = json.loads(
        CliRunner().invoke(main, [*args, *asked, "--scenario", "comm-slower:2"]).output
    )
    hidden, hide, slower = doc["scenarios"]
    assert hidden["name"] == "all-comm-hidden" and hidden["ranks"] == [0, 1]
    assert hidden["changed"] == "every transfer delays nothing"
    assert hidden["step_ns"] == hide["step_ns"] and hidden["speedup"] > 1.1
    assert slower["changed"] == "every transfer 2x slower" and slower["speedup"] < 1
    # its defaults put it in the default list, after the built-ins
    default = json.loads(CliRunner().invoke(main, args).output)["scenarios"]
    assert [s["name"] for s in default][-2:] == ["no-overlap-tax", "all-comm-hidden"]
    assert "comm-slower" not in {s["name"].split(":")[0] for s in default}  # only when asked


def test_register_refuses_a_taken_or_odd_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "SCENARIOS", dict(registry.SCENARIOS))
    with pytest.raises(ValueError, match="registered already"):
        register(Scenario("replay", "x", apply=_all_hidden, changed=ALL_HIDDEN.changed))
    for name in ("Fix", "a:b", "a b", ""):
        with pytest.raises(ValueError, match="lower-case"):
            register(Scenario(name, "x", apply=_all_hidden, changed=ALL_HIDDEN.changed))


def test_whatif_help_lists_the_scenarios_without_numpy() -> None:
    code = (
        "import sys\n"
        "from traceoverlap.cli import main\n"
        "try:\n"
        "    main(['whatif', '--help'], standalone_mode=False)\n"
        "finally:\n"
        "    print('numpy' in sys.modules, 'pandas' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "no-overlap-tax" in out.stdout and out.stdout.splitlines()[-1] == "False False"
