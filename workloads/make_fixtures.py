"""Regenerate ``fixtures/workloads/`` from real CPU (gloo) runs of every strategy.

    python -m traceoverlap_workloads.make_fixtures            # into <repo>/fixtures/workloads
    python -m traceoverlap_workloads.make_fixtures --out DIR

Each run: tiny GPT, 2 ranks, 1 wait + 1 warmup + 3 active steps, gzipped Kineto traces
``<strategy>/rank{0,1}.json.gz`` (about 100 KB each). ``bucketed_slow/`` is ``bucketed`` with rank 1
sleeping 20 ms before each backward (a straggler, for cross-rank analysis). Timings differ from run to
run; tests on these files assert structure, not durations.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from .strategies import STRATEGIES

COMMON = ["--world-size", "2", "--preset", "tiny", "--steps", "3", "--warmup", "1", "--wait", "1"]
RUNS: dict[str, list[str]] = {s: ["--strategy", s] for s in STRATEGIES}
RUNS["bucketed_slow"] = ["--strategy", "bucketed", "--slow-rank", "1", "--slow-ms", "20"]


def default_out() -> Path:
    repo = Path(__file__).resolve().parents[1]
    if (repo / "pyproject.toml").is_file():
        return repo / "fixtures" / "workloads"
    raise SystemExit("make_fixtures: not in a source checkout; pass --out DIR")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m traceoverlap_workloads.make_fixtures")
    ap.add_argument("--out", type=Path, default=None, help="default: <repo>/fixtures/workloads")
    ap.add_argument("--only", nargs="*", choices=sorted(RUNS), help="regenerate just these")
    args = ap.parse_args(argv)
    out = args.out or default_out()
    for name in args.only or list(RUNS):
        target = out / name
        for old in target.glob("rank*.json.gz"):
            old.unlink()
        cmd = [
            sys.executable,
            "-m",
            "traceoverlap_workloads",
            *RUNS[name],
            *COMMON,
            "--out",
            str(target),
        ]
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, check=False).returncode
        if rc != 0:
            print(f"make_fixtures: {name} failed (exit {rc})", file=sys.stderr)
            return rc
        sizes = ", ".join(
            f"{p.name} {p.stat().st_size / 1024:.0f} KB"
            for p in sorted(target.glob("rank*.json.gz"))
        )
        print(f"make_fixtures: {name}: {sizes} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
