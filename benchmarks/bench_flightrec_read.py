"""Benchmark: reading the Flight Recorder dumps of a large job (issue 39: 1,000 ranks in seconds).

Run: ``python benchmarks/bench_flightrec_read.py [--ranks 1000] [--entries 6] [--json] [--keep DIR]``.

Synthesises ``--ranks`` dumps from the real torch 2.13 gloo sample
(fixtures/flightrec/sample_gloo_2rank: rank ``r`` is a copy of rank ``r % 2``'s dump, its default
group's members set to the whole world), each ring ``--entries`` long (the sample's five
all_reduces repeated with renumbered sequence ids, then its last entry; 6 is the sample as it
is, torch's default ring holds 2,000), as pickles or (``--json``) as JSON, then reads them with
:func:`traceoverlap.readers.flightrec.read_flight_records` in a child process: wall and CPU
seconds, rows, the child's peak RSS.

Measured on the 2-core development machine (shared, so wall times wander): 1,000 ranks x 6
entries 0.6 CPU-s (pickle or JSON), 85 MB; 1,000 x 200 entries 3.1 CPU-s, 200 MB; 100 x 2,000
2.4 CPU-s, 190 MB: about 12 us an entry, in one process (the caller may map the files over
processes: ``read_flight_records(paths, map_parts=...)``).

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
from traceoverlap.readers.flightrec import read_flight_records
t, c = time.perf_counter(), time.process_time()
fr = read_flight_records([sys.argv[1]])
wall, cpu = time.perf_counter() - t, time.process_time() - c
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{len(fr.ranks)} ranks, {len(fr.entries)} entries: {wall:.2f} s wall, {cpu:.2f} s CPU, "
      f"peak RSS {rss:.0f} MB; notes: {len(fr.notes)}")
"""


def _dump(rank: int, world: int, entries: int) -> dict[str, Any]:
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
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.keep or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        for r in range(args.ranks):
            d = _dump(r, args.ranks, args.entries)
            if args.json:
                for e in d["entries"]:
                    e.pop("frames", None)
                (out / f"fr_{r}.json").write_text(json.dumps(d))
            else:
                (out / f"fr_{r}").write_bytes(pickle.dumps(d, protocol=2))
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, str(out)],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        print(proc.stdout.strip() or proc.stderr[-2000:])


if __name__ == "__main__":
    main()
