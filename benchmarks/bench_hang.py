"""Benchmark: the hang analysis on 1,000 ranks x a ring of 2,000 entries (synthesised).

Run: ``python benchmarks/bench_hang.py [--ranks 1000] [--entries 2000] [--groups 8]``.

Builds the :class:`~traceoverlap.core.flightrec.FlightRecords` tables directly (the shape a
reader produces from torch 2.13 dumps: the contract's columns and dtypes): every rank enqueues
``--entries`` all_reduces, cycling over the default group (one in ``--groups``) and its subgroup
(the rest; ``--groups`` - 1 subgroups of ``ranks / (groups - 1)`` members each, members
recorded); in the default group one rank (the
planted culprit, rank ``ranks // 3``) stops one collective short, so every other rank waits for
it. Times ``diagnose_hang`` in-process (wall and CPU, best of ``--repeat``) and its peak Python
allocation (tracemalloc), and prints the answer, which must name the planted rank.
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc

import numpy as np
import pandas as pd

from traceoverlap.core.flightrec import ENTRY_COLUMNS, GROUP_COLUMNS, FlightRecords
from traceoverlap.run.hang import diagnose_hang


def synthesise(ranks: int, entries: int, groups: int) -> tuple[FlightRecords, int]:
    culprit = ranks // 3
    sub = max(1, groups - 1)
    per = max(1, ranks // sub)
    r = np.repeat(np.arange(ranks, dtype=np.int64), entries)
    i = np.tile(np.arange(entries, dtype=np.int64), ranks)
    # entry i of every rank: group i % groups; 0 is the default group, else the rank's subgroup
    gi = i % groups
    sg = np.minimum(r // per, sub - 1) + 1
    g = np.where(gi == 0, 0, sg if groups > 1 else 0)
    # each group's own sequence: the default group once per cycle of ``groups`` entries, the
    # rank's subgroup the other ``groups - 1`` times
    seq = np.where(gi == 0, i // groups + 1, (i // groups) * (groups - 1) + gi)
    keep = ~((r == culprit) & (i == entries - 1) & (gi == 0))
    if keep.all():  # the last entry was not a default-group one: drop the last of those
        last0 = entries - 1 - ((entries - 1) % groups)
        keep = ~((r == culprit) & (i == last0))
    n = int(keep.sum())
    name = np.where(g == 0, "0", g.astype(str))
    desc = np.where(g == 0, "default_pg", np.char.add("sub", g.astype(str)))
    e = pd.DataFrame(
        {
            "rank": r[keep],
            "record_id": i[keep],
            "pg_id": g[keep],
            "pg_name": name[keep],
            "pg_desc": desc[keep],
            "collective_seq_id": seq[keep],
            "p2p_seq_id": np.zeros(n, np.int64),
            "op_id": seq[keep],
            "is_p2p": np.zeros(n, bool),
            "op": np.full(n, "nccl:all_reduce", object),
            "state": np.full(n, "completed", object),
            "retired": np.ones(n, bool),
            "input_sizes": np.full(n, "[[1000]]", object),
            "output_sizes": np.full(n, "[[1000]]", object),
            "input_dtypes": np.full(n, '["Float"]', object),
            "output_dtypes": np.full(n, '["Float"]', object),
            "numel_in": np.full(n, 1000, np.int64),
            "time_created_ns": (i[keep] * 1_000_000 + r[keep] * 7) % (2**62),
            "time_started_ns": pd.array([pd.NA] * n, dtype="Int64"),
            "time_completed_ns": i[keep] * 1_000_000 + 500_000,
            "timeout_ms": np.full(n, 600_000, np.int64),
            "thread_id": np.full(n, "1", object),
            "thread_name": np.full(n, "python", object),
            "frame": np.full(n, "train.py:42 in step", object),
            "stack": pd.array([pd.NA] * n, dtype="string"),
        }
    )
    e = e[[c for c, _ in ENTRY_COLUMNS]].astype(dict(ENTRY_COLUMNS))
    rows = []
    for rank in range(ranks):
        rows.append(
            {
                "rank": rank,
                "pg_id": 0,
                "pg_name": "0",
                "pg_desc": "default_pg",
                "members": json.dumps(list(range(ranks))),
                "size": ranks,
            }
        )
        if groups > 1:
            k = min(rank // per, sub - 1) + 1
            ms = [x for x in range(ranks) if min(x // per, sub - 1) + 1 == k]
            rows.append(
                {
                    "rank": rank,
                    "pg_id": k,
                    "pg_name": str(k),
                    "pg_desc": f"sub{k}",
                    "members": json.dumps(ms),
                    "size": len(ms),
                }
            )
    gt = pd.DataFrame(rows)
    for c, _ in GROUP_COLUMNS:
        if c not in gt:
            gt[c] = pd.NA
    gt = gt[[c for c, _ in GROUP_COLUMNS]].astype(dict(GROUP_COLUMNS))
    world = tuple(range(ranks))
    return FlightRecords(entries=e, groups=gt, ranks=world, world=world), culprit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=1000)
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    t0 = time.perf_counter()
    recs, culprit = synthesise(args.ranks, args.entries, args.groups)
    print(
        f"synthesised {len(recs.entries):,} entries in {time.perf_counter() - t0:.1f} s "
        f"({recs.entries.memory_usage(deep=True).sum() / 2**20:.0f} MiB as a DataFrame)"
    )
    best = None
    for _ in range(args.repeat):
        w, c = time.perf_counter(), time.process_time()
        h = diagnose_hang(recs)
        w, c = time.perf_counter() - w, time.process_time() - c
        best = (w, c) if best is None or c < best[1] else best
    assert best is not None
    tracemalloc.start()
    diagnose_hang(recs)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(
        f"diagnose_hang: {best[0]:.2f} s wall, {best[1]:.2f} s CPU (best of {args.repeat}); "
        f"peak allocation {peak / 2**20:.0f} MiB"
    )
    print(f"answer: {h.answer}")
    print(f"planted: rank {culprit} stops one collective short in group 0")
    assert f"rank {culprit} never called" in h.answer, "the answer does not name the planted rank"


if __name__ == "__main__":
    main()
