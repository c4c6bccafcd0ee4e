"""Hand-built Flight Recorder records for the hang tests: the contract's tables
(:mod:`traceoverlap.core.flightrec`), one dict per entry, every other column null."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pandas as pd

from traceoverlap.core.flightrec import ENTRY_COLUMNS, GROUP_COLUMNS, FlightRecords


def entry(
    rank: int,
    seq: int,
    op: str = "gloo:all_reduce",
    pg: str = "0",
    desc: str = "default_pg",
    sizes: Any = ((1000,),),
    dtypes: Any = ("Float",),
    p2p_seq: int | None = None,
    **more: Any,
) -> dict[str, Any]:
    """One entry: a collective at ``seq`` of group ``pg`` (``p2p_seq``: a send/recv instead)."""
    sz = json.dumps([list(s) for s in sizes])
    dt = json.dumps(list(dtypes))
    row: dict[str, Any] = {
        "rank": rank,
        "pg_id": int(pg) if pg.isdigit() else 9,
        "pg_name": pg,
        "pg_desc": desc,
        "collective_seq_id": 0 if p2p_seq is not None else seq,
        "p2p_seq_id": p2p_seq if p2p_seq is not None else 0,
        "op_id": seq,
        "is_p2p": p2p_seq is not None,
        "op": op,
        "state": "scheduled",
        "input_sizes": sz,
        "output_sizes": sz,
        "input_dtypes": dt,
        "output_dtypes": dt,
        "frame": f"train.py:{10 + seq} in step",
    }
    row.update(more)
    return row


def records(
    rows: list[dict[str, Any]],
    groups: list[dict[str, Any]] | None = None,
    world: tuple[int, ...] | None = None,
    ranks: tuple[int, ...] | None = None,
) -> FlightRecords:
    e = pd.DataFrame(rows)
    for col, _dt in ENTRY_COLUMNS:
        if col not in e:
            e[col] = pd.NA
    e = e[[c for c, _ in ENTRY_COLUMNS]].astype(dict(ENTRY_COLUMNS))
    e["record_id"] = e.groupby("rank").cumcount().astype("Int64")
    g = pd.DataFrame(groups or [])
    for col, _ in GROUP_COLUMNS:
        if col not in g:
            g[col] = pd.NA
    g = g[[c for c, _ in GROUP_COLUMNS]].astype(dict(GROUP_COLUMNS))
    have = ranks if ranks is not None else tuple(sorted(e["rank"].unique().tolist()))
    return FlightRecords(entries=e, groups=g, ranks=tuple(have), world=world)


def load_pickles(paths: list[Path]) -> FlightRecords:
    """A minimal loader of torch 2.13 pickle dumps, for the tests only (the package's reader is
    ``traceoverlap.readers.flightrec``): rank from the file name's trailing number."""
    rows = []
    groups = []
    world = None
    for p in paths:
        rank = int("".join(ch for ch in p.name if ch.isdigit())[-3:] or 0)
        d = pickle.loads(p.read_bytes())  # noqa: S301 - our own fixture
        for ent in d["entries"]:
            name, desc = ent["process_group"]
            frames = [f for f in ent.get("frames", []) if "/torch/" not in f["filename"]]
            rows.append(
                {
                    "rank": rank,
                    "pg_id": ent["pg_id"],
                    "pg_name": name,
                    "pg_desc": desc,
                    "collective_seq_id": ent["collective_seq_id"],
                    "p2p_seq_id": ent["p2p_seq_id"],
                    "op_id": ent["op_id"],
                    "is_p2p": ent["is_p2p"],
                    "op": ent["profiling_name"],
                    "state": ent["state"],
                    "retired": ent["retired"],
                    "input_sizes": json.dumps(ent["input_sizes"]),
                    "output_sizes": json.dumps(ent["output_sizes"]),
                    "input_dtypes": json.dumps(ent["input_dtypes"]),
                    "output_dtypes": json.dumps(ent["output_dtypes"]),
                    "time_created_ns": ent["time_created_ns"],
                    "time_started_ns": ent.get("time_discovered_started_ns") or None,
                    "time_completed_ns": ent.get("time_discovered_completed_ns") or None,
                    "timeout_ms": ent["timeout_ms"],
                    "frame": (
                        f"{frames[0]['filename'].rsplit('/', 1)[-1]}:{frames[0]['line']} in "
                        f"{frames[0]['name']}"
                        if frames
                        else None
                    ),
                }
            )
        for pg, st in d.get("pg_status", {}).items():
            groups.append(
                {"rank": rank, "pg_name": pg, "last_enqueued": st["last_enqueued_collective"]}
            )
        cfg = d.get("pg_config", {})
        for v in cfg.values():
            m = json.loads(v.get("ranks") or "[]")
            if m and world is None:
                world = tuple(m)
    return records(rows, groups, world=world)
