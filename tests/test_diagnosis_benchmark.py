"""The diagnosis benchmark's scorer (benchmarks/diagnosis/score.py, docs/benchmark.md).

Fast tests: the mapping of a hand-built JSON report to the truth's fields, the comparison, the
baseline check and the markdown block; one run of the whole scorer on the four small development
scenarios of tests/data/diagnosis_dev (fixture traces, truth written from the fixtures' README).
Slow (``--runslow``): the committed runs scored against the committed baseline (the CI gate).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.diagnosis import score as sc

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT / "tests" / "data" / "diagnosis_dev"


def _step(rank: int, step: int, bottleneck: str, **parts: int) -> dict[str, object]:
    row: dict[str, object] = {"rank": rank, "step": step, "bottleneck": bottleneck}
    for k in ("wait", "transfer", "unmatched", "tail", "dependency", "host"):
        row[f"exposed_{k}_ns"] = parts.get(k, 0)
    row["exposed_comm_ns"] = (
        parts.get("wait", 0) + parts.get("transfer", 0) + parts.get("unmatched", 0)
    )
    return row


def _report(steps: list[dict[str, object]], device_kind: str = "cpu") -> dict[str, object]:
    """A report with 3 ranks: rank 2 waited for rank 1 which waited for rank 0 (the root), plus a
    little waiting for rank 1 itself."""
    return {
        "traces": [{"rank": r, "device_kind": device_kind} for r in range(3)],
        "steps": steps,
        "stragglers": {
            "clock_aligned": True,
            "matched": 6,
            "ranks": [  # most blamed first, as the report orders them
                {"rank": 0, "last_count": 4, "exposed_waited_for_ns": 50, "root_waited_for_ns": 90},
                {"rank": 1, "last_count": 2, "exposed_waited_for_ns": 40, "root_waited_for_ns": 0},
                {"rank": 2, "last_count": 0, "exposed_waited_for_ns": 0, "root_waited_for_ns": 0},
            ],
        },
        "blame": [
            # root 0: 60 + 30 = 90 ns of exposed wait; root 1: 0 (its own chain ends at 0)
            {"root_rank": 0, "exposed_wait_ns": 60, "cause": "dataloader", "cause_ns": 50},
            {"root_rank": 0, "exposed_wait_ns": 30, "cause": "forward", "cause_ns": 20},
        ],
        "findings": [{"title": "waiting for a late peer", "advice": "rank 0's `dataloader`"}],
        "notes": ["a note"],
        "collectives": [
            {"purpose": "ddp-gradient-allreduce", "exposed_ns": 70, "transfer_ns": 5, "wait_ns": 1},
            {"purpose": "unknown", "exposed_ns": 60, "transfer_ns": 9, "wait_ns": 9},
            {"purpose": "ddp-broadcast", "exposed_ns": 10, "transfer_ns": 99, "wait_ns": 0},
        ],
    }


def test_report_to_prediction() -> None:
    rep = _report([_step(2, 1, "peer-wait-bound", wait=80, transfer=10, dependency=10)])
    p = sc.predict_from_report(rep)
    # the first rank of the ordered table; the next rank that caused exposed waiting second
    assert p["straggler"] == 0 and p["straggler_top2"] == [0, 1]
    assert p["moving"] is False  # a straggler named, no "moves" anywhere
    # blame summed by root: rank 0 has 90 ns; its cause with most cause_ns: dataloader (50 > 20)
    assert p["root_rank"] == 0 and p["root_op"] == "dataloader"
    # wait 80 > transfer 10: the wait part is the largest
    assert p["cause"] == "wait"
    assert p["verdicts"] == {"2:1": "peer-wait-bound"}
    # exposed by purpose: ddp-gradient-allreduce 70 > unknown 60 > broadcast 10
    assert p["purpose"] == "ddp-gradient-allreduce"
    assert "rank 0's `dataloader`" in p["advice_text"] and "a note" in p["advice_text"]
    assert p["culprit"] is True


def test_report_without_waiting_names_nobody() -> None:
    rep = _report([_step(0, 1, "compute-bound", transfer=1, host=1)])
    for r in rep["stragglers"]["ranks"]:  # type: ignore[index]
        r["exposed_waited_for_ns"] = 0
    rep["blame"] = []
    p = sc.predict_from_report(rep)
    assert p["straggler"] is None and p["straggler_top2"] == [] and p["root_rank"] is None
    assert "moving" not in p and "root_op" not in p and p["culprit"] is False


def test_unaligned_clocks_say_nothing_about_ranks() -> None:
    rep = _report([_step(0, 1, "peer-wait-bound", wait=5)])
    rep["stragglers"]["clock_aligned"] = False  # type: ignore[index]
    p = sc.predict_from_report(rep)
    assert not {"straggler", "straggler_top2", "root_rank", "moving"} & set(p)
    truth = {"straggler": 0, "root_rank": 0}
    out = sc.compare(truth, p)
    assert out["straggler_top1"] == [sc.NOT_SAID] and out["root_rank"] == [sc.NOT_SAID]


def test_moving_is_read_from_the_words_of_section_14() -> None:
    rep = _report([_step(0, 1, "peer-wait-bound", wait=5)])
    rep["findings"] = [{"title": "the late rank moves: 3 in steps 2, 4; 5 in steps 3, 5"}]
    assert sc.predict_from_report(rep)["moving"] is True
    # FSDP advice says "moves" of data: not a moving straggler
    rep["findings"] = [{"advice": "a native reduce-scatter moves (n-1)/n of the data"}]
    assert sc.predict_from_report(rep)["moving"] is False


def test_explicit_fields_win() -> None:
    """A report that says ``straggler`` / ``moving`` itself (diagnosis.md §14) is read as is."""
    rep = _report([_step(0, 1, "peer-wait-bound", wait=5)])
    rep["stragglers"]["straggler"] = None  # type: ignore[index]
    rep["stragglers"]["moving"] = True  # type: ignore[index]
    p = sc.predict_from_report(rep)
    assert p["straggler"] is None and p["moving"] is True


@pytest.mark.parametrize(
    ("steps", "device", "want"),
    [
        # the parts first: wait 5 > transfer 3
        ([_step(0, 1, "peer-wait-bound", wait=5, transfer=3, host=3)], "cpu", "wait"),
        # unmatched 6 > wait 5 > transfer 0
        ([_step(0, 1, "exposed-communication", wait=5, unmatched=6, host=6)], "cpu", "unmatched"),
        # transfer largest, 2 of 3 rank-steps communication-bound: transfer whatever its cause
        (
            [
                _step(0, 1, "communication-bound", transfer=9, dependency=9),
                _step(1, 1, "communication-bound", transfer=9, dependency=9),
                _step(2, 1, "idle-bound", transfer=9, dependency=9),
            ],
            "cpu",
            "transfer",
        ),
        # transfer largest, not comm-bound: its largest cause. tail 4 > host 3 > dependency 2
        (
            [_step(0, 1, "exposed-communication", transfer=9, tail=4, host=3, dependency=2)],
            "cpu",
            "transfer",
        ),
        # dependency 5 largest: blocked on a CPU timeline, dependency on a GPU
        (
            [_step(0, 1, "exposed-communication", transfer=9, dependency=5, host=4)],
            "cpu",
            "blocked",
        ),
        (
            [_step(0, 1, "exposed-communication", transfer=9, dependency=5, host=4)],
            "gpu",
            "dependency",
        ),
        ([_step(0, 1, "exposed-communication", transfer=9, dependency=4, host=5)], "cpu", "host"),
        # 2 of 3 rank-steps compute-bound: nothing is lost, whatever is exposed
        (
            [
                _step(0, 1, "compute-bound", wait=9),
                _step(1, 1, "compute-bound", wait=9),
                _step(2, 1, "peer-wait-bound", wait=9),
            ],
            "cpu",
            "none",
        ),
        ([_step(0, 1, "idle-bound")], "cpu", "none"),  # no exposed communication
        # 2 of 3 rank-steps idle-bound: idle is not exposed communication; wait 18 > transfer 9
        (
            [
                _step(0, 1, "idle-bound", wait=9),
                _step(1, 1, "idle-bound", transfer=9, host=9),
                _step(2, 1, "peer-wait-bound", wait=9),
            ],
            "cpu",
            "wait",
        ),
    ],
)
def test_cause_mapping(steps: list[dict[str, object]], device: str, want: str) -> None:
    assert sc.predict_from_report(_report(steps, device))["cause"] == want


def test_compare_fields() -> None:
    pred = {
        "straggler": 1,
        "straggler_top2": [1, 3],
        "moving": False,
        "root_rank": 3,
        "root_op": "microbatch#2",
        "cause": "blocked",
        "verdicts": {"0:1": "peer-wait-bound", "0:2": "idle-bound", "1:1": "compute-bound"},
        "purpose": "pipeline-p2p",
        "advice_text": "Rank 3 was late; use more micro-batches",
        "culprit": True,
    }
    truth = {
        "straggler": 3,
        "moving": False,
        "root_rank": 3,
        "root_op": r"microbatch#\d+",  # a regex matches the whole answer
        "cause": "dependency",  # one class with the CPU's blocked
        "verdict": None,
        "verdict_per_rank": {"0": "peer-wait-bound"},  # rank 1 not scored
        "purpose": "pipeline-p2p",
        "advice_must": [r"rank 3", r"interleav"],
        "advice_must_not": [r"bucket"],
        "healthy": True,
        "hang": False,
    }
    out = sc.compare(truth, pred)
    R, W, NS = sc.RIGHT, sc.WRONG, sc.NOT_SAID
    assert out["straggler_top1"] == [W] and out["straggler_top2"] == [R]
    assert out["moving"] == [R] and out["root_rank"] == [R] and out["root_op"] == [R]
    assert out["cause"] == [R] and out["purpose"] == [R]
    assert out["verdict"] == [R, W]  # rank 0's two steps; rank 1 has no truth
    assert out["advice_must"] == [R, W]  # case-insensitive "rank 3"; no "interleav"
    assert out["advice_must_not"] == [R]
    assert out["healthy_no_culprit"] == [W]
    assert "hang" not in out
    # a moving straggler is scored even with no fixed straggler in the truth; a healthy
    # truth (no straggler, not moving) does not score it
    assert sc.compare({"straggler": None, "moving": True}, pred)["moving"] == [W]
    assert "moving" not in sc.compare({"straggler": None, "moving": False}, pred)
    # verdict_per_rank names the ranks scored; "verdict" alone scores every rank-step
    assert sc.compare(
        {"verdict": "compute-bound", "verdict_per_rank": {"1": "compute-bound"}}, pred
    )["verdict"] == [R]
    assert sc.compare({"verdict": "peer-wait-bound"}, pred)["verdict"] == [R, W, W]
    # "unknown" is not said unless the truth asks it
    assert sc.compare({"purpose": "moe-dispatch"}, {"purpose": "unknown"})["purpose"] == [NS]
    assert sc.compare({"purpose": "unknown"}, {"purpose": "unknown"})["purpose"] == [R]
    # purpose_also: as right as the purpose
    assert sc.compare({"purpose": "moe-dispatch", "purpose_also": ["pipeline-p2p"]}, pred)[
        "purpose"
    ] == [R]
    # "dependency" said on a GPU is not "blocked" asked
    assert sc.compare({"cause": "blocked"}, {"cause": "dependency"})["cause"] == [W]
    # nothing said: every field not said, none wrong
    empty = sc.compare(truth, {})
    assert all(set(v) == {sc.NOT_SAID} for v in empty.values())


def test_hang_answers() -> None:
    from types import SimpleNamespace

    def rep(verdict: str, culprits: tuple[int, ...] = (), missing: tuple[int, ...] = ()) -> object:
        return SimpleNamespace(
            verdict=verdict,
            answer="the answer",
            evidence=("e",),
            notes=(),
            culprits=tuple((r, "0", 6) for r in culprits),
            missing_ranks=missing,
        )

    p = sc.predict_hang(rep("missing", (5,)))
    assert (p["hang"], p["straggler"], p["root_rank"], p["culprit"]) == (True, 5, 5, True)
    p = sc.predict_hang(rep("healthy"))
    assert (p["hang"], p["straggler"], p["culprit"]) == (False, None, False)
    # partial: "rank 1 dumped nothing: it may be the one stuck": no hang or top-1 answer
    p = sc.predict_hang(rep("partial", missing=(1,)))
    assert "hang" not in p and "straggler" not in p and p["straggler_top2"] == [1]


def test_hang_scenario_from_dumps(tmp_path: Path) -> None:
    """A scenario of dumps only (fixtures/flightrec/skip: rank 1 never called all_reduce #6),
    both ``fr_r`` and ``fr_r.json`` present: each rank read once."""
    d = tmp_path / "runs" / "skip"
    d.mkdir(parents=True)
    for f in (ROOT / "fixtures" / "flightrec" / "skip").iterdir():
        (d / f.name).symlink_to(f)
    (d / "truth.json").write_text(json.dumps({"hang": True, "straggler": 1, "root_rank": 1}))
    (s,) = sc.load_scenarios(tmp_path / "runs")
    assert [p.name for p in s.dumps] == ["fr_0", "fr_1"] and s.traces == []
    out = sc.compare(s.truth, sc.run_traceoverlap(s))
    assert out == {
        "straggler_top1": [sc.RIGHT],
        "straggler_top2": [sc.RIGHT],
        "root_rank": [sc.RIGHT],
        "hang": [sc.RIGHT],
    }


def test_tally_and_check() -> None:
    outcomes = {"a": {"cause": [sc.RIGHT]}, "b": {"cause": [sc.WRONG], "verdict": [sc.NOT_SAID]}}
    t = sc.tally(outcomes)
    assert (t["cause"].right, t["cause"].wrong, t["cause"].accuracy) == (1, 1, 0.5)
    assert t["verdict"].accuracy == 0.0 and t["purpose"].accuracy is None
    result = {
        "tools": {
            "traceoverlap": {
                "fields": {f: t[f].as_dict() for f in sc.FIELDS},
                "scenarios": outcomes,
            }
        }
    }
    base = sc.baseline_of({**result, "n_scenarios": 2})
    assert sc.check(result, base) == []
    worse = json.loads(json.dumps(base))
    worse["fields"]["cause"]["accuracy"] = 1.0  # the baseline had every cause right
    worse["scenarios"]["b"]["cause"] = [sc.RIGHT]
    (msg,) = sc.check(result, worse)
    assert "cause of exposed time: accuracy 50% < baseline 100%" in msg and "in b" in msg
    gone = json.loads(json.dumps(base))
    gone["scenarios"]["c"] = {}
    assert any("c" in m and "not scored" in m for m in sc.check(result, gone))


def test_markdown_block(tmp_path: Path) -> None:
    doc = tmp_path / "b.md"
    doc.write_text("# Title\n\nprose\n")
    sc.write_markdown_block(doc, "table 1")
    sc.write_markdown_block(doc, "table 2")
    text = doc.read_text()
    assert text.startswith("# Title\n\nprose\n\n")
    assert text.count(sc.MD_BEGIN) == 1 and "table 2" in text and "table 1" not in text


def test_score_dev_scenarios(tmp_path: Path) -> None:
    """The whole scorer on the development scenarios, through the command line."""
    out = tmp_path / "r.json"
    base = tmp_path / "base.json"
    md = tmp_path / "b.md"
    cmd = [sys.executable, "-m", "benchmarks.diagnosis", "score", "--runs", str(DEV), "-q"]
    run = subprocess.run(
        [
            *cmd,
            "--no-peers",
            "--json",
            str(out),
            "--markdown",
            str(md),
            "--write-baseline",
            str(base),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    r = json.loads(out.read_text())
    assert r["scenarios"] == sorted(p.name for p in DEV.iterdir() if p.is_dir())
    per = r["tools"]["traceoverlap"]["scenarios"]
    # planted: rank 1 sleeps (straggler_sleep) and its peer waits for it (fixtures README)
    for name in ("dev-slow_rank", "dev-pipeline_slow_last"):
        assert per[name]["straggler_top1"] == [sc.RIGHT], r["tools"]["traceoverlap"]["said"]
        assert per[name]["root_op"] == [sc.RIGHT]
    # every item is counted once in its field's tally
    for f, d in r["tools"]["traceoverlap"]["fields"].items():
        assert d["n"] == sum(len(p.get(f, [])) for p in per.values())
        assert d["n"] == d["right"] + d["wrong"] + d["not_said"]
    assert sc.MD_BEGIN in md.read_text()
    # the baseline just written passes its own check; one field worse fails it
    baseline = json.loads(base.read_text())
    assert sc.check(r, baseline) == []
    baseline["fields"]["straggler_top1"]["accuracy"] = 2.0
    assert len(sc.check(r, baseline)) == 1


@pytest.mark.slow
@pytest.mark.timeout(960)
def test_committed_runs_do_not_drop() -> None:
    """CI: the committed runs scored against the committed baseline (no drop in any field)."""
    if not sc.BASELINE.exists() or not sc.RUNS.is_dir():
        pytest.skip("no committed runs / baseline")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.diagnosis",
            "score",
            "-q",
            "--no-peers",
            "--check",
            str(sc.BASELINE),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


def test_evidence_of_a_planted_straggler() -> None:
    """``evidence``: stage 1 sleeps in every micro-batch of every step (fixtures README), so the
    root blamed is rank 1 in every step, and the parts add up to the exposed time."""
    (s,) = sc.load_scenarios(DEV, ["dev-pipeline_slow_last"])
    ev = sc.evidence(s)
    assert ev["root_by_step"] and set(ev["root_by_step"].values()) == {1}
    assert ev["top_rank"] == 1 and ev["ranks_given"] == ev["world_size"] == 2
    e = ev["exposed_ms"]
    causes = e["wait"] + e["tail"] + e["dependency"] + e["host"]
    assert abs(causes - (e["wait"] + e["transfer"] + e.get("unmatched", 0.0))) < 0.5  # rounding


def test_by_cause_rows() -> None:
    """Healthy runs in their own row whatever their cause; the others by the truth's cause."""
    result = {
        "truth": {
            "a": {"cause": "wait"},
            "b": {"cause": "wait"},
            "c": {"cause": "none", "healthy": True},
        },
        "tools": {
            "traceoverlap": {
                "scenarios": {
                    "a": {"cause": [sc.RIGHT], "straggler_top1": [sc.RIGHT]},
                    "b": {"cause": [sc.WRONG], "straggler_top1": [sc.NOT_SAID]},
                    "c": {"cause": [sc.WRONG]},
                }
            }
        },
    }
    head, rows = sc.by_cause_rows(result)
    by = {r[0]: dict(zip(head, r, strict=True)) for r in rows}
    assert set(by) == {"healthy", "wait"} and by["wait"]["runs"] == "2"
    assert by["wait"]["cause of exposed time"] == "50% (1/1/0)"
    assert by["wait"]["straggler (top 1)"] == "50% (1/0/1)"
    assert by["healthy"]["cause of exposed time"] == "0% (0/1/0)"


def test_truth_json_wins_and_a_relabel_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """truth.json (written before the run) is scored; a catalog truth that differs is reported;
    a folder with no truth.json takes the catalog's."""
    runs = tmp_path / "runs"
    for name in ("a", "b"):
        (runs / name).mkdir(parents=True)
        (runs / name / "rank0.json.gz").symlink_to(DEV / "dev-naive" / "rank0.json.gz")
    (runs / "a" / "truth.json").write_text(json.dumps({"straggler": 1}))
    monkeypatch.setattr(
        sc, "_catalog_truths", lambda: {"a": {"straggler": None}, "b": {"straggler": 0}}
    )
    a, b = sc.load_scenarios(runs)
    assert (a.truth, a.truth_differs) == ({"straggler": 1}, True)
    assert (b.truth, b.truth_differs) == ({"straggler": 0}, False)
