"""``python -m benchmarks.diagnosis score|record``: the labelled diagnosis benchmark.

- ``score [--runs DIR] [--only NAME ...] [--json FILE] [--markdown FILE] [--check BASELINE]
  [--write-baseline [FILE]] [--no-peers]``: runs traceoverlap on every scenario under
  ``runs/`` (default ``benchmarks/diagnosis/runs``), scores it against each scenario's truth and
  prints the table (and the peers' columns, from ``peers/*_predictions.json``). ``--check``
  exits 1 when an accuracy falls below the baseline's.
- ``evidence [--runs DIR] NAME ...``: the facts a failure's reason in ``why.json`` is written
  from (exposed waiting per step time, the blamed root per step, exposed parts, verdicts).
- ``record ...``: ``benchmarks.diagnosis.record.main`` (records the runs; optional).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _score(argv: list[str]) -> int:
    from . import score as sc

    ap = argparse.ArgumentParser(prog="python -m benchmarks.diagnosis score")
    ap.add_argument("--runs", type=Path, default=sc.RUNS, help="folder of scenario folders")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="only these scenarios")
    ap.add_argument("--json", type=Path, metavar="FILE", help="write the full result as JSON")
    ap.add_argument("--markdown", type=Path, metavar="FILE", help="rewrite FILE's marked block")
    ap.add_argument("--check", type=Path, metavar="BASELINE", help="exit 1 on a drop")
    ap.add_argument(
        "--write-baseline",
        type=Path,
        nargs="?",
        const=sc.BASELINE,
        metavar="FILE",
        help=f"write the baseline (default {sc.BASELINE.relative_to(Path.cwd()) if sc.BASELINE.is_relative_to(Path.cwd()) else sc.BASELINE})",
    )
    ap.add_argument("--no-peers", action="store_true", help="traceoverlap only")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    a = ap.parse_args(argv)
    result = sc.score(a.runs, a.only, peer_files=[] if a.no_peers else None, progress=not a.quiet)
    if not result["n_scenarios"]:
        print(f"score: error: no scenarios under {a.runs}", file=sys.stderr)
        return 2
    if a.json:
        a.json.write_text(json.dumps(result, indent=1, sort_keys=True, default=str) + "\n")
    if a.markdown:
        sc.write_markdown_block(a.markdown, sc.render_markdown(result))
    if a.write_baseline:
        a.write_baseline.write_text(
            json.dumps(sc.baseline_of(result), indent=1, sort_keys=True) + "\n"
        )
    print(sc.render_text(result), flush=True)
    if a.check:
        problems = sc.check(result, json.loads(a.check.read_text()))
        for p in problems:
            print(f"score: below baseline: {p}", file=sys.stderr)
        if problems:
            return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "score":
        return _score(rest)
    if cmd == "evidence":
        from . import score as sc

        ap = argparse.ArgumentParser(prog="python -m benchmarks.diagnosis evidence")
        ap.add_argument("--runs", type=Path, default=sc.RUNS)
        ap.add_argument("names", nargs="+", metavar="NAME")
        a = ap.parse_args(rest)
        for s in sc.load_scenarios(a.runs, a.names):
            print(s.name, json.dumps(sc.evidence(s)))
        return 0
    if cmd == "record":
        from . import record  # type: ignore[attr-defined]

        return int(record.main(rest) or 0)
    print(
        f"python -m benchmarks.diagnosis: error: unknown command {cmd!r} (score, record)",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
