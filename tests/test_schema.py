"""Every output table is declared once, in traceoverlap/core/schema.py: the outputs write exactly its
columns, and the docs agree with it (docs/schema.md is generated from it; the prose docs name no
column it lacks, and define every step metric it has)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import re
from pathlib import Path

import pytest
from conftest import REPO, WORKLOAD_FIXTURES

from traceoverlap import analyze
from traceoverlap.core import schema
from traceoverlap.reporters import compare_text, csv_report, json_report, whatif_report
from traceoverlap.run.compare import compare
from traceoverlap.run.findings import Finding
from traceoverlap.run.results import Stats, StepRef, Summary
from traceoverlap.whatif.scenarios import ScenarioResult, WhatIf

DOCS = REPO / "docs"
PROSE = [*sorted(p for p in DOCS.glob("*.md") if p.name != "schema.md"), REPO / "README.md"]

#: Names in backquotes that look like columns but are not output columns, and why.
NOT_COLUMNS = {
    "lost_ratio": "a threshold (--lost-threshold, [thresholds] lost_ratio)",
    "offsets_ns": "an attribute of Collectives (per unit clock offsets), not a table column",
    "aligned_start_ns": "Python API only: a column of Collectives.per_rank (docs/job-model.md)",
    "aligned_end_ns": "Python API only: a column of Collectives.per_rank (docs/job-model.md)",
    "last_arrival_ns": "Python API only: a column of Collectives.instances (docs/job-model.md)",
}
#: A name in backquotes (`potential_speedup`, `exposed_{wait,tail}_ns`), and one that looks like
#: a column by its unit suffix.
_TOKEN = re.compile(r"`([a-z][a-z0-9_]*(?:\{[a-z,]+\}[a-z0-9_]*)?)`")
_COLUMN_LIKE = re.compile(r".+_(?:ns|ratio|gbps)")


def _expand(token: str) -> list[str]:
    m = re.fullmatch(r"([a-z0-9_]*)\{([a-z,]+)\}([a-z0-9_]*)", token)
    return [f"{m[1]}{x}{m[3]}" for x in m[2].split(",")] if m else [token]


def _named(doc: Path) -> set[str]:
    return {n for t in _TOKEN.findall(doc.read_text(encoding="utf-8")) for n in _expand(t)}


DECLARED = {c.name for t in schema.TABLES for c in t.columns}


# --- the docs ------------------------------------------------------------------------------------


def test_docs_table_is_generated_from_the_schema() -> None:
    text = (DOCS / "schema.md").read_text(encoding="utf-8")
    assert text == schema.markdown(), (
        "docs/schema.md is stale: python -m traceoverlap.core.schema --markdown > docs/schema.md"
    )


def _hang_declared() -> set[str]:
    """The columns of the Flight Recorder records and of the hang report (docs/hang.md): their
    own tables, declared in core/flightrec.py and run/hang.py, not in the trace schema."""
    from traceoverlap.core import flightrec
    from traceoverlap.run import hang

    names = {c for c, _ in (*flightrec.ENTRY_COLUMNS, *flightrec.GROUP_COLUMNS)}
    for table in (hang.STUCK_COLUMNS, hang.CHAIN_COLUMNS, hang.TIMING_COLUMNS, hang.LATE_COLUMNS):
        names |= set(table)
    return names


@pytest.mark.parametrize("doc", PROSE, ids=lambda p: p.name)
def test_docs_name_no_undeclared_column(doc: Path) -> None:
    column_like = {n for n in _named(doc) if _COLUMN_LIKE.fullmatch(n)}
    declared = DECLARED | (_hang_declared() if doc.name == "hang.md" else set())
    extra = column_like - declared - set(NOT_COLUMNS)
    assert not extra, (
        f"{doc.name} documents columns traceoverlap/core/schema.py lacks: {sorted(extra)}"
    )


def test_every_step_metric_is_defined_in_the_docs() -> None:
    """numbers.md (the short tour) and metrics.md + diagnosis.md (the contract) each define every
    time and ratio column of the step table."""
    metrics = [c.name for c in schema.STEPS.columns if c.unit in (schema.NS, schema.RATIO, "x")]
    metrics = [m for m in metrics if m not in ("start_ns", "end_ns")]  # the window, no metric
    contract = _named(DOCS / "metrics.md") | _named(DOCS / "diagnosis.md")
    for doc, named in (
        ("numbers.md", _named(DOCS / "numbers.md")),
        ("metrics/diagnosis", contract),
    ):
        missing = [m for m in metrics if m not in named]
        assert not missing, f"{doc} does not define {missing}"


def _cli_example() -> dict:
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    m = re.search(r"### JSON schema.*?```json\n(.*?)```", text, re.S)
    assert m, "docs/cli.md lost its JSON example"
    return json.loads(m.group(1))


_JSON_TYPES = {
    schema.INT: (int,),
    schema.FLOAT: (float, int),
    schema.STR: (str,),
    schema.BOOL: (bool,),
    schema.LABEL: (int, str),
    schema.INT_LIST: (list,),
    schema.FLOAT_LIST: (list,),
    schema.STR_LIST: (list,),
    schema.OBJECT: (dict,),
}


def _agrees(row: dict, table: schema.Table, where: str) -> None:
    """``row`` has exactly the table's columns, in order, each of its declared type."""
    assert tuple(row) == table.names, f"{where}: {list(row)} != {list(table.names)}"
    for c in table.columns:
        v = row[c.name]
        if v is None:
            assert c.nullable, f"{where}: {c.name} is null but not nullable"
            continue
        ok = isinstance(v, _JSON_TYPES[c.type]) and not (c.type == schema.INT and v is True)
        assert ok, f"{where}: {c.name} = {v!r} is not {c.type}"


def test_the_json_example_in_the_docs_agrees_with_the_schema() -> None:
    d = _cli_example()
    _agrees(d["steps"][0], schema.STEPS, "cli.md steps")
    _agrees(d["summary"]["run"], schema.SUMMARY, "cli.md summary.run")
    _agrees(d["summary"]["run"]["worst_step"], schema.STEP_REF, "cli.md worst_step")
    _agrees(d["findings"][0], schema.FINDINGS, "cli.md findings")
    coll = d["collectives"][0]
    _agrees(coll, schema.COLLECTIVES, "cli.md collectives")
    _agrees(coll["per_rank"]["0"], schema.COLLECTIVE_PER_RANK, "cli.md per_rank")
    _agrees(d["stragglers"]["ranks"][0], schema.STRAGGLERS, "cli.md stragglers.ranks")
    _agrees(d["stragglers"]["steps"][0], schema.STEP_SKEW, "cli.md stragglers.steps")
    _agrees(d["blame"][0], schema.BLAME, "cli.md blame")


# --- the schema itself ---------------------------------------------------------------------------

_SUFFIX_UNIT = {"_ns": schema.NS, "_ratio": schema.RATIO, "_gbps": schema.GBPS}


@pytest.mark.parametrize("table", schema.TABLES, ids=lambda t: t.name)
def test_names_say_their_unit(table: schema.Table) -> None:
    """``_ns`` is nanoseconds, ``_ratio`` a ratio (CONTRIBUTING "Habits"), an integer time is named
    ``_ns``; no column twice in a table."""
    assert len(set(table.names)) == len(table.names), table.names
    for c in table.columns:
        for suffix, unit in _SUFFIX_UNIT.items():
            if c.name.endswith(suffix):
                assert c.unit == unit, f"{table.name}.{c.name}: unit {c.unit!r}, not {unit!r}"
        if c.unit == schema.NS and c.type == schema.INT:
            assert c.name.endswith("_ns"), f"{table.name}.{c.name} is in ns: name it _ns"


def test_summaries_and_the_gate_cover_every_step_metric() -> None:
    stats = [c.name for c in schema.STEPS.columns if c.stats]
    assert sorted(schema.NS_METRICS + schema.RATIO_METRICS) == sorted(stats)
    from traceoverlap.run.gate import GATE_METRICS

    assert set(GATE_METRICS) == set(stats)


def test_dataclass_outputs_are_the_declared_tables() -> None:
    """Summary, Stats, StepRef and Finding are written as dataclasses: their fields are the
    tables."""
    for cls, table in (
        (Summary, schema.SUMMARY),
        (Stats, schema.STATS),
        (StepRef, schema.STEP_REF),
        (Finding, schema.FINDINGS),
    ):
        assert tuple(f.name for f in dataclasses.fields(cls)) == table.names, cls


# --- what the reporters write --------------------------------------------------------------------


@pytest.fixture(scope="module")
def bucketed():
    return analyze(WORKLOAD_FIXTURES / "bucketed")


def test_json_writes_the_declared_tables(bucketed) -> None:
    d = json.loads(json_report.render(bucketed))
    for row in d["steps"]:
        _agrees(row, schema.STEPS, "steps")
    for s in (d["summary"]["run"], *d["summary"]["ranks"].values()):
        _agrees(s, schema.SUMMARY, "summary")
        assert tuple(s["metrics"]) == schema.NS_METRICS + schema.RATIO_METRICS
        assert tuple(s["totals"]) == schema.NS_METRICS
        for st in s["metrics"].values():
            _agrees(st, schema.STATS, "stats")
        _agrees(s["worst_step"], schema.STEP_REF, "worst_step")
        _agrees(s["slowest_step"], schema.STEP_REF, "slowest_step")
    assert d["findings"] and d["collectives"] and d["blame"], "the fixture should have them all"
    for f in d["findings"]:
        _agrees(f, schema.FINDINGS, "findings")
    for c in d["collectives"]:
        _agrees(c, schema.COLLECTIVES, "collectives")
        for r in c["per_rank"].values():
            _agrees(r, schema.COLLECTIVE_PER_RANK, "per_rank")
    for r in d["stragglers"]["ranks"]:
        _agrees(r, schema.STRAGGLERS, "stragglers.ranks")
    for r in d["stragglers"]["steps"]:
        _agrees(r, schema.STEP_SKEW, "stragglers.steps")
    for r in d["blame"]:
        _agrees(r, schema.BLAME, "blame")


def test_the_declared_parts_add_up_to_the_step(bucketed) -> None:
    """diagnosis.md §1: every ns of a step is exactly one of the parts."""
    st = bucketed.steps
    total = sum(st[c.name].astype("int64") for c in schema.PARTS)
    assert (total == st[schema.STEP_NS.name].astype("int64")).all()


def test_csv_header_is_the_step_table(bucketed) -> None:
    header = next(csv.reader(io.StringIO(csv_report.render(bucketed))))
    assert tuple(header) == schema.STEPS.names


def test_compare_writes_the_declared_tables(bucketed) -> None:
    d = compare_text.to_dict(compare(analyze(WORKLOAD_FIXTURES / "naive"), bucketed))
    assert d["metrics"] and d["collectives"]
    for r in d["metrics"]:
        _agrees(r, schema.COMPARE_METRICS, "compare metrics")
    for r in d["collectives"]:
        _agrees(r, schema.COMPARE_COLLECTIVES, "compare collectives")


def test_whatif_json_writes_the_declared_tables() -> None:
    """The shape only (the numbers are test_whatif's): a what-if result with one of each."""
    s = ScenarioResult(
        "fix-rank:1", 5e6, 1.2, "rank 1 like its peers", (1,), ("AllReduce",), (5e6,)
    )
    w = WhatIf(
        ("2",), (6e6,), (6e6,), (0.0,), 0.0, 0.0, (s,), (s,), rounds=2, tax_ns=10,
        tax_overlap_ns=100, tax_by_family_ns=(("AllReduce", 10),), tax_steps_ns=(10.0,),
        tax_rank_steps=((0, "2", 10, 100),),
    )  # fmt: skip
    d = whatif_report.to_dict(w)
    assert tuple(d["replay"]) == schema.REPLAY.names
    assert tuple(d["replay"]["steps"][0]) == schema.REPLAY_STEPS.names
    assert tuple(d["scenarios"][0]) == tuple(d["fix_rank"][0]) == schema.SCENARIOS.names
    assert tuple(d["overlap_tax"]) == schema.OVERLAP_TAX.names
    assert tuple(d["overlap_tax"]["rank_steps"][0]) == schema.TAX_RANK_STEPS.names
