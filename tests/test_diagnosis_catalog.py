"""The diagnosis benchmark's catalog (benchmarks/diagnosis/catalog.py) is well formed and its
runs are in place, without torch: every scenario has every field with a value from the
vocabulary, a style script that exists, flags that plant what the truth says, and a runs folder
holding exactly the kept ranks' traces with the same truth and seed the catalog gives."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from benchmarks.diagnosis.catalog import SCENARIOS
from traceoverlap.core.vocab import BOTTLENECKS, PURPOSES

ROOT = Path(__file__).resolve().parents[1] / "benchmarks" / "diagnosis"
STYLES = ROOT / "styles"
RUNS = ROOT / "runs"

FIELDS = {"name", "script", "args", "world_size", "ranks_kept", "seed", "truth"}
TRUTH = {
    "straggler",
    "moving",
    "root_rank",
    "root_op",
    "cause",
    "verdict",
    "verdict_per_rank",
    "purpose",
    "purpose_also",
    "advice_must",
    "advice_must_not",
    "healthy",
    "hang",
    "notes",
}
CAUSES = {"wait", "transfer", "dependency", "host", "blocked", "unmatched", "none"}
IDS = [sc["name"] for sc in SCENARIOS]


def _flag(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def test_enough_distinct_scenarios() -> None:
    # issue 38 asks for at least 50, over every style of the table
    assert len(SCENARIOS) >= 50
    assert len(set(IDS)) == len(IDS)
    scripts = {p.name for p in STYLES.glob("*.py") if not p.name.startswith("_")}
    assert scripts == {sc["script"] for sc in SCENARIOS}, (
        "a style without a scenario, or the reverse"
    )


def test_the_table_is_covered() -> None:
    truths = [sc["truth"] for sc in SCENARIOS]
    assert any(t["healthy"] for t in truths)
    assert any(t["moving"] for t in truths)
    assert any(sc["ranks_kept"] is not None for sc in SCENARIOS)
    assert any("--contention-rank" in sc["args"] for sc in SCENARIOS)
    assert any("--uneven-rank" in sc["args"] for sc in SCENARIOS)
    assert any("--poll-ms" in sc["args"] for sc in SCENARIOS)
    for p2p in ("blocking", "isend", "batch"):
        assert any(_flag(sc["args"], "--p2p") == p2p for sc in SCENARIOS)
    for sched in ("gpipe", "1f1b"):
        assert any(_flag(sc["args"], "--schedule") == sched for sc in SCENARIOS)
    for routing in ("even", "skewed"):
        assert any(_flag(sc["args"], "--routing") == routing for sc in SCENARIOS)


@pytest.mark.parametrize("sc", SCENARIOS, ids=IDS)
def test_entry_is_well_formed(sc: dict) -> None:
    assert set(sc) == FIELDS
    assert re.fullmatch(r"[a-z0-9_]+", sc["name"])
    assert (STYLES / sc["script"]).is_file()
    assert all(isinstance(a, str) for a in sc["args"])
    assert "--out" not in sc["args"] and "--seed" not in sc["args"]  # record.py adds them
    world = sc["world_size"]
    assert 2 <= world <= 8
    kept = sc["ranks_kept"]
    if kept is not None:
        assert kept == sorted(set(kept)) and 0 < len(kept) < world and kept[-1] < world
    assert isinstance(sc["seed"], int)
    t = sc["truth"]
    assert set(t) == TRUTH
    ranks = range(world)
    for key in ("straggler", "root_rank"):
        assert t[key] is None or t[key] in ranks
    if t["straggler"] is not None and kept is not None:
        assert t["straggler"] in kept  # a dropped rank cannot be named from the trace
    assert t["cause"] in CAUSES
    assert t["verdict"] is None or t["verdict"] in BOTTLENECKS
    for r, v in t["verdict_per_rank"].items():
        assert int(r) in (kept if kept is not None else ranks) and v in BOTTLENECKS
    for p in [t["purpose"], *t["purpose_also"]]:
        assert p is None or p in PURPOSES
    for rx in [*t["advice_must"], *t["advice_must_not"]]:
        re.compile(rx)
    assert isinstance(t["moving"], bool) and isinstance(t["healthy"], bool)
    assert t["hang"] is False  # hangs are the Flight Recorder fixtures' job
    assert t["notes"]


@pytest.mark.parametrize("sc", SCENARIOS, ids=IDS)
def test_truth_follows_the_planted_flags(sc: dict) -> None:
    """The truth says what the flags plant: nothing planted is healthy, a planted slow rank is
    the straggler (unless dropped or moving), a partial run's cause is unmatched."""
    a, t = sc["args"], sc["truth"]
    slow = _flag(a, "--slow-rank")
    planted = [x for x in (slow, _flag(a, "--uneven-rank"), _flag(a, "--contention-rank")) if x]
    hot = _flag(a, "--hot") if _flag(a, "--routing") == "skewed" else None
    nothing = not planted and hot is None and "--poll-ms" not in a
    assert t["healthy"] == nothing
    if t["healthy"]:
        assert t["straggler"] is None and not t["moving"]
    if "--moving" in a:
        assert t["moving"] and t["straggler"] is None
    if sc["ranks_kept"] is not None:
        assert t["cause"] == "unmatched"
    elif slow is not None and "--moving" not in a and _flag(a, "--slow-range") != "heartbeat":
        assert t["straggler"] == int(slow) and t["root_op"] == _flag(a, "--slow-range")
    if hot is not None:
        assert t["straggler"] == int(hot) and t["root_op"] == "expert"
    for flag in ("--uneven-rank", "--contention-rank"):
        if _flag(a, flag) is not None and sc["ranks_kept"] is None:
            assert t["straggler"] == int(_flag(a, flag)) and t["root_op"] is None


@pytest.mark.parametrize("sc", SCENARIOS, ids=IDS)
def test_run_is_recorded(sc: dict) -> None:
    run = RUNS / sc["name"]
    kept = sc["ranks_kept"] if sc["ranks_kept"] is not None else list(range(sc["world_size"]))
    assert sorted(p.name for p in run.glob("rank*.json.gz")) == sorted(
        f"rank{r}.json.gz" for r in kept
    )
    for r in kept:
        with (run / f"rank{r}.json.gz").open("rb") as f:
            assert f.read(2) == b"\x1f\x8b"  # gzip
    recorded = json.loads((run / "recorded.json").read_text())
    assert recorded["seed"] == sc["seed"] and recorded["world_size"] == sc["world_size"]
    assert recorded["ranks_kept"] == kept
    assert recorded["torch"] and recorded["date"] and recorded["command"]
    assert json.loads((run / "truth.json").read_text()) == sc["truth"]


def test_runs_stay_small() -> None:
    sizes = [p.stat().st_size for p in RUNS.glob("*/rank*.json.gz")]
    assert sum(sizes) < 15 * 2**20
    assert not [p for p in RUNS.iterdir() if p.name not in set(IDS)], "a run without a scenario"


def test_a_trace_names_its_steps() -> None:
    # one decompressed trace: the profiler's step markers are there (the scorer needs them)
    sc = SCENARIOS[0]
    path = RUNS / sc["name"] / "rank0.json.gz"
    text = gzip.decompress(path.read_bytes()).decode()
    assert re.search(r'"name": "ProfilerStep#\d+"', text)
