"""``traceoverlap hang``'s output: the answer first, then the evidence (docs/hang.md).

Text wraps to the terminal's width; every string drawn from a dump (op names, frames, group
descriptions) goes through :func:`traceoverlap.core.fmt.safe_text`. JSON holds the same report as
data, its fields documented in docs/hang.md ("JSON").
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..core import fmt
from ._format import wrap
from .json_report import encode

if TYPE_CHECKING:
    from ..run.hang import HangReport

#: The JSON's ``schema_version``: changes only when a field changes meaning or disappears.
HANG_SCHEMA_VERSION = 1

#: Rows of the stuck table and of the slowest collectives shown in text.
STUCK_ROWS = 12
SLOW_ROWS = 5


def _cell(v: Any) -> str:
    if v is None or v is pd.NA or (isinstance(v, float) and v != v):
        return "-"
    return fmt.safe_text(str(v))


def _op(v: Any) -> str:
    s = _cell(v)
    return s.split(":", 1)[1] if ":" in s else s


def _short_frame(v: Any) -> str:
    """``/long/path/train.py:12 in step`` -> ``train.py:12 in step`` (the table's column; the
    evidence and the JSON keep the whole path)."""
    s = _cell(v)
    head, sep, tail = s.partition(":")
    return head.rsplit("/", 1)[-1] + sep + tail if sep else s


def _dtypes(v: Any) -> str:
    try:
        lst = json.loads(v) if isinstance(v, str) else None
    except ValueError:
        lst = None
    return ",".join(str(x) for x in lst) if lst else "-"


def _table(header: list[str], rows: list[list[str]], width: int, indent: str = "  ") -> list[str]:
    """A plain left-aligned table; the last column takes what is left and is cut with ``…``, and
    so is a line that is still wider than ``width``."""
    cols = len(header)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(cols)]
    fixed = sum(widths[:-1]) + 2 * (cols - 1) + len(indent)
    last = max(8, width - fixed)
    out = []
    for r in [header, *rows]:
        cells = [r[i].ljust(widths[i]) for i in range(cols - 1)]
        tail = r[-1] if len(r[-1]) <= last else r[-1][: last - 1] + "…"
        line = (indent + "  ".join([*cells, tail])).rstrip()
        out.append(line if len(line) <= width else line[: width - 1] + "…")
    return out


def _group_lines(report: HangReport, width: int) -> list[str]:
    g = report.groups
    if g.empty:
        return []
    lines = ["Process groups"]
    rows = []
    for r in g.itertuples(index=False):
        members = f"{r.members}" + ("" if r.members_known else "?")
        last_ok = "-" if pd.isna(r.last_ok_seq) else f"{_op(r.last_ok_op)} #{r.last_ok_seq}"
        stuck = "-" if pd.isna(r.stuck_seq) else f"{_op(r.stuck_op)} #{r.stuck_seq}"
        rows.append(
            [_cell(r.pg), _cell(r.pg_desc), members, str(r.dumped), last_ok, stuck, _cell(r.kind)]
        )
    lines += _table(
        ["group", "desc", "members", "dumped", "all reached", "first stuck", "why"], rows, width
    )
    if not g["members_known"].fillna(False).all():
        lines += wrap("(? members not recorded: the ranks whose dumps name the group)", width, "  ")
    lines.append("")
    return lines


def render_text(report: HangReport, width: int = 80) -> str:
    """The report as text: the answer, the evidence, then the tables that back it."""
    lines: list[str] = []
    lines += wrap(report.answer, width, "", "  ")
    lines.append("")
    if report.evidence:
        lines.append("Evidence")
        for e in report.evidence:
            lines += wrap(e, width, "  - ", "    ")
        lines.append("")
    lines += _group_lines(report, width)
    s = report.stuck
    if len(s):
        lines.append("At the stuck point, rank by rank")
        order = s.assign(w=(s["status"] == "waiting")).sort_values(["pg", "w", "rank"])
        rows = []
        for r in order.head(STUCK_ROWS).itertuples(index=False):
            shape = (
                "(no inputs)"
                if isinstance(r.input_sizes, str) and r.input_sizes == "[]"
                else f"{_cell(r.input_sizes)} {_dtypes(r.input_dtypes)}"
            )
            if not pd.isna(r.op):
                called = f"{_op(r.op)} {shape}"
            elif pd.isna(r.last_op):
                called = "(nothing recorded)"
            else:
                called = (
                    f"(last: {_op(r.last_op)} #{_cell(r.last_seq)} of group {_cell(r.last_pg)})"
                )
            rows.append([_cell(r.pg), str(r.seq), str(r.rank), _cell(r.status), called,
                         _short_frame(r.frame)])  # fmt: skip
        lines += _table(["group", "seq", "rank", "status", "called", "frame"], rows, width)
        if len(s) > STUCK_ROWS:
            lines.append(f"  ... {len(s) - STUCK_ROWS} more rows (--format json has them all)")
        lines.append("")
    if len(report.chain) > 2:
        lines.append("Wait-for chain (first waiter to the rank at its end)")
        for r in report.chain.itertuples(index=False):
            ranks = json.loads(r.ranks)
            who = ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")
            lines += wrap(
                f"{r.step}. rank(s) {who}: {_cell(r.status)} in {_op(r.op)} #{_cell(r.seq)} of "
                f"group {_cell(r.pg)}",
                width,
                "  ",
                "      ",
            )
        lines.append("")
    lines += _timing_lines(report, width)
    if report.notes:
        lines.append("Notes")
        for n in report.notes:
            lines += wrap(n, width, "  - ", "    ")
    return "\n".join(lines).rstrip() + "\n"


def _timing_lines(report: HangReport, width: int) -> list[str]:
    t = report.timings
    if t.empty:
        return []
    lines = ["Slowest arrivals (collectives every member reached)"]
    top = t.sort_values(["arrival_spread_ns", "pg", "seq"], ascending=[False, True, True])
    rows = []
    for r in top.head(SLOW_ROWS).itertuples(index=False):
        rows.append([_cell(r.pg), str(r.seq), _op(r.op), str(r.ranks),
                     fmt.duration(r.arrival_spread_ns), f"rank {r.last_rank}",
                     fmt.duration(r.duration_ns, missing="-")])  # fmt: skip
    lines += _table(["group", "seq", "op", "ranks", "spread", "last", "duration"], rows, width)
    late = report.late
    if len(late):
        lines.append("")
        lines.append(
            "Who waited for whom (waiting credited once, to each collective's last arrival)"
        )
        top_l = late.sort_values(["caused_wait_ns", "pg", "rank"], ascending=[False, True, True])
        rows = [
            [_cell(r.pg), str(r.rank), str(r.times_last), fmt.duration(r.caused_wait_ns),
             fmt.duration(r.waited_ns)]
            for r in top_l.head(SLOW_ROWS).itertuples(index=False)
        ]  # fmt: skip
        lines += _table(["group", "rank", "last at", "others waited", "it waited"], rows, width)
    lines.append("")
    return lines


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """A table as a list of objects, nulls as null (never NaN)."""
    if df.empty:
        return []
    out = df.astype(object).where(df.notna(), None).to_dict(orient="records")
    return [{str(k): v for k, v in r.items()} for r in out]


def render_json(report: HangReport) -> str:
    """The report as JSON (docs/hang.md "JSON")."""
    stuck = _records(report.stuck)
    for r in stuck:
        if r.get("waits_for") is not None:
            r["waits_for"] = json.loads(r["waits_for"])
    chain = _records(report.chain)
    for r in chain:
        r["ranks"] = json.loads(r["ranks"])
    obj = {
        "schema_version": HANG_SCHEMA_VERSION,
        "answer": report.answer,
        "verdict": report.verdict,
        "evidence": list(report.evidence),
        "ranks": list(report.ranks),
        "missing_ranks": list(report.missing_ranks),
        "culprits": [{"rank": r, "pg": pg, "seq": seq} for r, pg, seq in report.culprits],
        "groups": _records(report.groups),
        "stuck": stuck,
        "chain": chain,
        "timings": _records(report.timings),
        "late": _records(report.late),
        "notes": list(report.notes),
    }
    return encode(obj)
