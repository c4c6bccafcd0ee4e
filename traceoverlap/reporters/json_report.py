"""JSON output: one object with a stable, documented schema (docs/cli.md "JSON schema"; every
column in docs/schema.md).

``schema_version`` changes only when a field changes meaning or disappears; new fields may be
added within a version. Times are integer nanoseconds, ratios floats in 0-1 (speedups >= 1) or
null; never NaN. Encoded with msgspec (a C encoder: large outputs in a fraction of a second).
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import pandas as pd

from .._version import __version__
from ..core.fmt import EscapedText
from ..core.schema import (
    BLAME,
    COLLECTIVE_PER_RANK,
    COLLECTIVES,
    LABEL,
    STEP_SKEW,
    STRAGGLERS,
    TABLES,
)
from ..core.vocab import as_label
from ..run.results import STEP_COLUMNS

if TYPE_CHECKING:
    from ..run.matching import Collectives
    from ..run.results import Analysis

SCHEMA_VERSION = 3


def _default(obj: Any) -> Any:
    """numpy / pandas values -> plain JSON values (NaN and NA -> null)."""
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return None if np.isnan(obj) else float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if obj is pd.NA or obj is pd.NaT:
        return None
    raise TypeError(f"cannot encode {type(obj).__name__} as JSON")


_ENCODER = msgspec.json.Encoder(enc_hook=_default)


def encode(obj: Any, indent: int = 2) -> EscapedText:
    """JSON text of ``obj`` (dicts, lists, dataclasses, numpy scalars), indented.

    Strings keep their exact text: control characters are escaped (``\\u001b``), DEL and C1
    too (a terminal showing the JSON never sees them raw); a file name that is not UTF-8
    (a surrogate-escaped ``str``) has its undecodable bytes replaced by U+FFFD. The text so
    holds nothing for ``safe_text`` to remove: an :class:`EscapedText`, written as it is."""
    try:
        raw = _ENCODER.encode(obj)
    except UnicodeEncodeError:
        raw = _ENCODER.encode(_valid_text(obj))
    return EscapedText(msgspec.json.format(_escape_c1(raw), indent=indent) + b"\n", "utf-8")


# C1 (U+0080-U+009F) in UTF-8: a lead byte 0xc2 (never a continuation byte) then 0x80-0x9f
_C1 = re.compile(b"\xc2[\x80-\x9f]")


def _escape_c1(raw: bytes) -> bytes:
    """UTF-8 JSON ``raw`` with DEL and the C1 controls (which msgspec writes raw) as ``\\u``
    escapes (the formatter keeps escapes as they are). Done on the compact bytes, before the
    indenting: each is a fast search for one byte when it is absent, and the C1 regex, led by
    its literal byte, skips from one 0xc2 to the next (a 23 MB output with a "µ" on every line:
    ~75 ms; the regex over the same ``str``: ~220 ms, whatever it holds once it is not ASCII)."""
    if b"\x7f" in raw:
        raw = raw.replace(b"\x7f", b"\\u007f")
    if b"\xc2" in raw:
        raw = _C1.sub(lambda m: b"\\u%04x" % m.group()[1], raw)
    return raw


def _valid_text(obj: Any) -> Any:
    """``obj`` with every string made encodable (surrogates -> U+FFFD), dataclasses as dicts."""
    if isinstance(obj, str):
        return obj.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    if isinstance(obj, dict):
        return {_valid_text(k): _valid_text(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_valid_text(v) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _valid_text(dataclasses.asdict(obj))
    return obj


#: step-label columns: ``string`` in the DataFrames, 4 / "4#2" / "all" in the JSON
_LABELS = frozenset(c.name for t in TABLES for c in t.columns if c.type == LABEL)


def records(df: pd.DataFrame, columns: tuple[str, ...] | list[str]) -> list[dict[str, Any]]:
    """Rows of ``df`` as dicts of plain values (NaN and NA -> None, step labels as labels),
    column by column."""
    cols = [c for c in columns if c in df.columns]
    values = []
    for c in cols:
        col = df[c]
        v = col.tolist()
        if isinstance(col.dtype, np.dtype) and col.dtype.kind in "iub":  # never NaN or NA
            values.append(v)
        elif c in _LABELS:
            values.append([None if x is pd.NA or x is None else as_label(x) for x in v])
        else:
            values.append(
                [None if x is pd.NA or (isinstance(x, float) and x != x) else x for x in v]
            )
    return [dict(zip(cols, row, strict=True)) for row in zip(*values, strict=True)]


def step_records(analysis: Analysis) -> list[dict[str, Any]]:
    """The step rows as plain dicts, fields in :data:`STEP_COLUMNS` order."""
    return records(analysis.steps, STEP_COLUMNS)


def collectives_dict(coll: Collectives) -> dict[str, Any]:
    per: dict[int, dict[str, dict[str, Any]]] = {}
    fields = COLLECTIVE_PER_RANK.names
    # null without a launch record (CPU work, or a kernel whose launch was cut); the nullable
    # text columns (``unmatched_why``) are null already
    no_launch = [c.name for c in COLLECTIVE_PER_RANK.columns if c.nullable]
    several = _units_per_rank(coll.per_rank) if len(coll.per_rank) else None
    for r in records(coll.per_rank, ["instance", "rank", "device", *fields]):
        key = str(r["rank"])
        if several is not None and int(several.get(r["rank"], 1)) > 1:
            key = f"{r['rank']}:{r['device']}"
        row = {f: r[f] for f in fields}
        for f in no_launch:
            if isinstance(row[f], (int, float)) and row[f] < 0:
                row[f] = None
        per.setdefault(int(r["instance"]), {})[key] = row
    colls = []
    for r in records(coll.instances, COLLECTIVES.names):
        r["ranks"] = list(r["ranks"])
        r["per_rank"] = per.get(int(r["instance"]), {})
        colls.append(r)
    return {
        "collectives": colls,
        "stragglers": {
            "clock": coll.clock,
            "clock_aligned": coll.aligned,
            "ranks_given": coll.ranks_given,
            "world_size": coll.world_size,
            "partial": coll.partial,
            "matched": coll.n_matched,
            "inconsistent": coll.n_inconsistent,
            "verdict": None
            if coll.verdict is None
            else {
                "rank": coll.verdict.rank,
                "wait_ratio": coll.verdict.wait_ratio,
                "rank_ratio": coll.verdict.rank_ratio,
                "min_ratio": coll.verdict.min_ratio,
                "moving": [{"rank": r, "steps": list(st)} for r, st in coll.verdict.moving],
                "text": coll.verdict.text(),
            },
            "ranks": records(coll.stragglers, STRAGGLERS.names),
            "steps": records(coll.step_skew, STEP_SKEW.names),
        },
        "blame": [{**b, "chain": list(b["chain"])} for b in records(coll.blame, BLAME.names)],
    }


def _units_per_rank(per_rank: pd.DataFrame) -> dict[int, int]:
    """Per rank: how many distinct units (devices, processes) its rows come from, as
    ``per_rank.groupby("rank")["unit"].nunique().to_dict()`` counts them."""
    rank, unit = per_rank["rank"].to_numpy(), per_rank["unit"].to_numpy()
    order = np.lexsort((unit, rank))
    rank, unit = rank[order], unit[order]
    first = np.ones(len(rank), dtype=bool)  # a (rank, unit) pair's first row
    first[1:] = (rank[1:] != rank[:-1]) | (unit[1:] != unit[:-1])
    ranks, counts = np.unique(rank[first], return_counts=True)
    return dict(zip(ranks.tolist(), counts.tolist(), strict=True))


def to_dict(analysis: Analysis) -> dict[str, Any]:
    opts = analysis.options
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "traceoverlap", "version": __version__},
        "traces": [t.to_dict() for t in analysis.traces],
        "options": {
            "step_regex": opts.step_regex,
            "steps": opts.steps.text if opts.steps else None,
            "ranks": list(opts.ranks) if opts.ranks is not None else None,
            "thresholds": dataclasses.asdict(opts.thresholds),
            "comm_patterns": list(opts.comm_patterns),
        },
        "steps": step_records(analysis),
        "summary": {
            "run": analysis.summary.run,
            "ranks": dict(analysis.summary.ranks),
        },
        "findings": [dataclasses.asdict(f) for f in analysis.findings],
        "unassigned_gpu_activities": dict(analysis.unassigned),
        "notes": list(analysis.notes),
    }
    if analysis.collectives is not None:
        out.update(collectives_dict(analysis.collectives))
    return out


def render(analysis: Analysis) -> str:
    return encode(to_dict(analysis))
