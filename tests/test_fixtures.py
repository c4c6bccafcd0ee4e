"""Structure of the committed real CPU traces (fixtures/workloads/, see its README).

These are real gloo runs, so durations vary between regenerations; every assertion here follows
from how each strategy schedules its all-reduces, never from a timing:

- naive / flat launch their all-reduces in ``grad_sync``, after ``backward`` returned, and wait for
  them there: every comm interval of a step starts after that step's backward range ends, so no
  comm overlaps backward; the only compute after it is grad division and the optimizer, which run
  after the blocking all-reduce returned, so overlap = 0.
- overlap / bucketed / ddp launch async all-reduces from gradient hooks during backward: the first
  comm of a step starts before backward ends, and it runs while backward computes, so overlap > 0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from traceoverlap import load
from traceoverlap.analysis import analyze
from traceoverlap.results import Analysis

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "workloads"
STRATEGIES = ("naive", "flat", "overlap", "bucketed", "ddp")
N_STEPS = 3  # make_fixtures: 3 active steps
N_PARAMS = 29  # tiny GPT: tok, pos, 2 x 12 per block, ln_f weight + bias, head


@pytest.fixture(scope="module")
def analyses() -> dict[str, Analysis]:
    return {name: analyze(FIXTURES / name) for name in (*STRATEGIES, "bucketed_slow")}


@pytest.fixture(scope="module")
def events() -> dict[str, pd.DataFrame]:
    """Every fixture's classified events (the analysis itself keeps none in memory)."""
    return {name: load(FIXTURES / name).events for name in (*STRATEGIES, "bucketed_slow")}


def _per_step(a: Analysis, ev: pd.DataFrame) -> pd.DataFrame:
    """One row per (rank, step): backward range end, first comm start, comm count (ns)."""
    assert a.windows is not None
    rows = []
    for w in a.windows.itertuples(index=False):
        inside = (
            (ev["rank"] == w.rank) & (ev["start_ns"] >= w.start_ns) & (ev["start_ns"] < w.end_ns)
        )
        comm = ev[inside & (ev["kind"] == "comm")]
        backward = ev[inside & (ev["name"] == "backward")]
        assert len(backward) == 1, (w.rank, w.step)
        rows.append(
            {
                "rank": w.rank,
                "step": w.step,
                "backward_end_ns": int(backward["end_ns"].iloc[0]),
                "first_comm_ns": int(comm["start_ns"].min()),
                "n_comm": len(comm),
            }
        )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_fixture_has_two_ranks_three_steps_and_gloo_comm(
    strategy: str, analyses: dict[str, Analysis]
) -> None:
    a = analyses[strategy]
    assert sorted(a.steps["rank"].unique()) == [0, 1]
    assert (a.steps.groupby("rank").size() == N_STEPS).all()
    assert (a.steps["comm_ns"] > 0).all() and (a.steps["compute_ns"] > 0).all()
    for f in sorted((FIXTURES / strategy).glob("rank*.json.gz")):
        assert f.stat().st_size < 300_000, f  # keep the repository small


@pytest.mark.parametrize(
    ("strategy", "collectives_per_step"),
    # naive / overlap: one all-reduce per parameter; flat: one for everything.
    [("naive", N_PARAMS), ("overlap", N_PARAMS), ("flat", 1)],
)
def test_collective_count_per_step_follows_the_strategy(
    strategy: str,
    collectives_per_step: int,
    analyses: dict[str, Analysis],
    events: dict[str, pd.DataFrame],
) -> None:
    per_step = _per_step(analyses[strategy], events[strategy])
    assert (per_step["n_comm"] == collectives_per_step).all()


@pytest.mark.parametrize("strategy", ["naive", "flat"])
def test_sync_after_backward_starts_comm_after_backward_and_hides_nothing(
    strategy: str, analyses: dict[str, Analysis], events: dict[str, pd.DataFrame]
) -> None:
    a = analyses[strategy]
    per_step = _per_step(a, events[strategy])
    assert (per_step["first_comm_ns"] >= per_step["backward_end_ns"]).all()
    assert (a.steps["overlap_ns"] == 0).all()
    assert (a.steps["exposed_comm_ns"] == a.steps["comm_ns"]).all()


@pytest.mark.parametrize("strategy", ["overlap", "bucketed", "ddp"])
def test_hooks_start_comm_during_backward_and_hide_some(
    strategy: str, analyses: dict[str, Analysis], events: dict[str, pd.DataFrame]
) -> None:
    a = analyses[strategy]
    per_step = _per_step(a, events[strategy])
    assert (per_step["first_comm_ns"] < per_step["backward_end_ns"]).all()
    assert (a.steps["overlap_ns"] > 0).all()
    assert (a.steps["overlap_ratio"] > 0).all()


def test_bucketed_launches_several_buckets_in_order(events: dict[str, pd.DataFrame]) -> None:
    # The tiny GPT holds ~0.8 MiB of fp32 gradients and the CPU bucket cap is 0.1 MiB, so there must
    # be several buckets, launched in index order 0, 1, 2, ... within each step.
    ev = events["bucketed"]
    launches = ev[ev["name"].astype(str).str.startswith("bucket_launch#")].sort_values("start_ns")
    idx = launches["name"].astype(str).str.extract(r"#(\d+) bytes=(\d+)").astype(int)
    assert idx[0].max() >= 2
    for rank in (0, 1):
        mine = idx[launches["rank"].to_numpy() == rank][0].to_numpy()
        # every step restarts at 0 and counts up by one
        starts = np.flatnonzero(mine == 0)
        assert len(starts) == N_STEPS
        for run in np.split(mine, starts[1:]):
            assert run.tolist() == list(range(len(run)))
    assert (idx[1] > 0).all()


def test_straggler_fixture_marks_the_sleep_on_rank_1_only(events: dict[str, pd.DataFrame]) -> None:
    ev = events["bucketed_slow"]
    sleeps = ev[ev["name"] == "straggler_sleep"]
    assert set(sleeps["rank"]) == {1}
    assert len(sleeps) == N_STEPS
    # --slow-ms 20: each sleep lasts at least 20 ms (time.sleep never returns early).
    assert ((sleeps["end_ns"] - sleeps["start_ns"]) >= 20_000_000).all()


def test_fixtures_carry_distributed_info() -> None:
    import gzip
    import json

    for strategy in (*STRATEGIES, "bucketed_slow"):
        for rank in (0, 1):
            with gzip.open(FIXTURES / strategy / f"rank{rank}.json.gz", "rt") as fh:
                info = json.load(fh)["distributedInfo"]
            assert (info["backend"], info["rank"], info["world_size"]) == ("gloo", rank, 2)
