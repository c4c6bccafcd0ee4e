"""Benchmark: reading the Flight Recorder dumps of a large job (issue 39: 1,000 ranks in seconds).

Run: ``python benchmarks/bench_flightrec_read.py [--ranks 1000] [--entries 6] [--json]
[--unshared] [-j JOBS] [--keep DIR | --read DIR]``.

Synthesises ``--ranks`` dumps from the real torch 2.13 gloo sample
(fixtures/flightrec/sample_gloo_2rank: rank ``r`` is a copy of rank ``r % 2``'s dump, its default
group's members set to the whole world), each ring ``--entries`` long (the sample's five
all_reduces repeated with renumbered sequence ids, then its last entry; 6 is the sample as it
is, torch's default ring holds 2,000), as pickles or (``--json``) as JSON, then reads them with
:func:`traceoverlap.run.flightrec.read_dumps` (what ``traceoverlap hang -j JOBS`` runs) in a
child process: wall and CPU seconds, rows, the child's peak RSS and, with ``-j`` 2 or more, the
worker processes' CPU and largest RSS. The copied entries share their lists (Python's pickler
memoises them); ``--unshared`` gives each entry its own, as torch's pickler writes them.
``--keep DIR`` writes the dumps there, ``--read DIR`` reads ones written before.

Measured on the 2-core development machine (shared with other jobs, so wall times wander),
1,000 ranks x 2,000 entries (2,000,000 entries, 200 MB of pickles with 13-frame stacks):

=================================  =========================================================
before (one process)               26.7 s CPU, peak RSS 1,280 MB (~13 us an entry)
after, ``-j 1``                    8.1 s CPU, peak RSS 607 MB (~4 us an entry)
after, ``-j 2``                    parent 1.9 s CPU, 608 MB; workers 7.4 s CPU, 56 MB each
after, ``--unshared``, ``-j 1``    14.1 s CPU, 610 MB (torch-shaped: 377 MB of pickles)
=================================  =========================================================

JSON dumps (``--json``, no frames), 200 ranks x 2,000 entries, ``-j 1``: before 7.4 s CPU,
435 MB; after 3.6 s CPU, 180 MB (``json.loads`` itself is ~70% of it: 10.6 of 14.8 ms a dump).

Where the time went and what changed (cProfile): the unpickler read a bare ``BytesIO`` one call
per opcode (8.4 ms a dump; through a buffered reader 2.6 ms, as fast as ``pickle.loads``); a
dict lookup per entry and field (now transposed in C: ``itemgetter`` and ``zip``); the string
columns as lists of 2,000 entries per rank (now int codes into the few distinct values, checked
on those); shapes and stacks formatted per entry (now once per distinct object or ``repr``); the
cyclic GC walking each unpickled ring on every young collection (now off while a dump is read:
2x on the part). Earlier figures, before: 1,000 x 6 entries 0.6 CPU-s, 85 MB; 1,000 x 200
entries 3.1 CPU-s, 200 MB; 100 x 2,000 2.4 CPU-s, 190 MB.

Not a test: its numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "fixtures" / "flightrec" / "sample_gloo_2rank"

CHILD = """
import resource, sys, time
from traceoverlap.run.flightrec import read_dumps
t, c = time.perf_counter(), time.process_time()
fr = read_dumps([sys.argv[1]], jobs=int(sys.argv[2]))
wall, cpu = time.perf_counter() - t, time.process_time() - c
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
ch = resource.getrusage(resource.RUSAGE_CHILDREN)
kids = f", workers {ch.ru_utime + ch.ru_stime:.2f} s CPU, peak RSS {ch.ru_maxrss / 1024:.0f} MB"
print(f"{len(fr.ranks)} ranks, {len(fr.entries)} entries: {wall:.2f} s wall, {cpu:.2f} s CPU, "
      f"peak RSS {rss:.0f} MB" + (kids if ch.ru_maxrss else "") + f"; notes: {len(fr.notes)}")
"""


def _dump(rank: int, world: int, entries: int, unshared: bool = False) -> dict[str, Any]:
    sys.path.insert(0, str(REPO))
    from traceoverlap.readers.flightrec._load import PlainUnpickler

    with open(SAMPLE / f"fr_{rank % 2}", "rb") as f:
        dump: dict[str, Any] = PlainUnpickler(f).load()
    dump["pg_config"][""]["ranks"] = str(list(range(world)))
    ring = dump["entries"]
    out = []
    for i in range(entries - 1):
        e = dict(ring[i % 5])
        e.update(record_id=i, collective_seq_id=i + 1, op_id=i + 1)
        if unshared:  # as torch writes them: a list of its own per entry (strings shared)
            for k in ("input_sizes", "output_sizes", "input_dtypes", "output_dtypes"):
                e[k] = [list(s) if isinstance(s, list) else s for s in e[k]]
            e["process_group"] = list(e["process_group"])
            e["frames"] = list(e["frames"])
        out.append(e)
    last = dict(ring[5])
    last.update(record_id=entries - 1, collective_seq_id=entries, op_id=entries)
    dump["entries"] = [*out, last]
    return dump


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=1000)
    ap.add_argument("--entries", type=int, default=6)
    ap.add_argument("--json", action="store_true", help="JSON dumps (no frames), not pickles")
    ap.add_argument("--keep", type=Path, help="write the dumps here and keep them")
    ap.add_argument(
        "--unshared",
        action="store_true",
        help="each entry's lists its own objects, as torch's pickler writes them (the default "
        "copies share them, which Python's pickler memoises)",
    )
    ap.add_argument("-j", "--jobs", type=int, default=1, help="processes reading the files")
    ap.add_argument("--read", type=Path, help="read these dumps (written before with --keep)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.read or args.keep or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        for r in range(0 if args.read else args.ranks):
            d = _dump(r, args.ranks, args.entries, args.unshared)
            if args.json:
                for e in d["entries"]:
                    e.pop("frames", None)
                (out / f"fr_{r}.json").write_text(json.dumps(d))
            else:
                (out / f"fr_{r}").write_bytes(pickle.dumps(d, protocol=2))
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, str(out), str(args.jobs)],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        print(proc.stdout.strip() or proc.stderr[-2000:])


if __name__ == "__main__":
    main()
