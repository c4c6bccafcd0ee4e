"""Record the diagnosis benchmark's runs: ``python -m benchmarks.diagnosis.record [NAMES...]``.

Each scenario of :data:`benchmarks.diagnosis.catalog.SCENARIOS` is run once, one at a time: its
style script is started once per rank (gloo on CPU, ``OMP_NUM_THREADS=1``, RANK / WORLD_SIZE /
MASTER_ADDR / MASTER_PORT in the environment), each rank writes ``rank{r}.json.gz``, the ranks not
in ``ranks_kept`` are dropped (a partial run), and ``runs/<name>/`` gets the kept traces,
``recorded.json`` (torch version, command, seed, date, the host's cores and load) and
``truth.json`` (the catalog's truth, written before any analysis).

No names: every scenario. ``--missing``: only the scenarios without a ``recorded.json`` yet.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = HERE / "runs"
STYLES = HERE / "styles"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _torch_version() -> str:
    out = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() or "unknown"


def _run_ranks(script: Path, argv: list[str], world: int, out: str, timeout_s: float) -> str | None:
    """Start one process per rank and wait for them all; None, or why the run failed (its
    ranks' last stderr lines are printed)."""
    port = _free_port()
    procs = []
    t0 = time.monotonic()
    for rank in range(world):
        env = dict(
            os.environ,
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(world),
            LOCAL_WORLD_SIZE=str(world),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script), *argv, "--out", out],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        )
    failed = None
    while failed is None:
        codes = [p.poll() for p in procs]
        bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
        if bad:
            failed = f"rank {bad[0][0]} exited {bad[0][1]}"
        elif all(c == 0 for c in codes):
            break
        elif time.monotonic() - t0 > timeout_s:
            failed = f"timed out after {timeout_s:g} s"
        else:
            time.sleep(0.1)
    for p in procs:
        if p.poll() is None:
            p.kill()
    for r, p in enumerate(procs):
        _, err = p.communicate()
        lines = [
            ln for ln in err.decode(errors="replace").splitlines() if not ln.startswith("USDT")
        ]
        if lines and failed:
            print(f"  rank {r}: " + "\n  ".join(lines[-8:]), file=sys.stderr)
    return failed


def record_one(sc: dict, timeout_s: float = 300.0, torch_version: str | None = None) -> bool:
    """Run one scenario; True when every rank finished and the kept traces are in place."""
    name = sc["name"]
    world = int(sc["world_size"])
    argv = [*sc["args"], "--seed", str(sc["seed"])]
    kept = sc["ranks_kept"] if sc["ranks_kept"] is not None else list(range(world))
    dest = RUNS / name
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"diag-{name}-") as tmp:
        failed = _run_ranks(STYLES / sc["script"], argv, world, tmp, timeout_s)
        missing = [r for r in kept if not (Path(tmp) / f"rank{r}.json.gz").exists()]
        if failed is None and missing:
            failed = f"no trace from ranks {missing}"
        if failed:
            print(f"record: {name}: FAILED ({failed})", file=sys.stderr, flush=True)
            return False
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        for r in kept:
            shutil.copy(Path(tmp) / f"rank{r}.json.gz", dest / f"rank{r}.json.gz")
    wall = time.monotonic() - t0
    load1, load5, _ = os.getloadavg()
    recorded = {
        "name": name,
        "torch": torch_version or _torch_version(),
        "python": platform.python_version(),
        "backend": "gloo",
        "device": "cpu",
        "command": ["python", f"benchmarks/diagnosis/styles/{sc['script']}", *argv, "--out", "DIR"],
        "env": {"OMP_NUM_THREADS": "1", "WORLD_SIZE": str(world)},
        "world_size": world,
        "ranks_recorded": list(range(world)),
        "ranks_kept": kept,
        "seed": sc["seed"],
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": {
            "nproc": os.cpu_count(),
            "loadavg_1m": round(load1, 2),
            "loadavg_5m": round(load5, 2),
        },
        "wall_s": round(wall, 1),
        "recorder": "benchmarks/diagnosis/record.py",
    }
    (dest / "recorded.json").write_text(json.dumps(recorded, indent=1) + "\n")
    (dest / "truth.json").write_text(json.dumps(sc["truth"], indent=1, sort_keys=True) + "\n")
    size = sum(f.stat().st_size for f in dest.glob("rank*.json.gz"))
    print(
        f"record: {name}: ok in {wall:.1f} s, {len(kept)} rank file(s), {size // 1024} KiB",
        flush=True,
    )
    return True


def main(argv: list[str] | None = None) -> int:
    from benchmarks.diagnosis.catalog import SCENARIOS

    ap = argparse.ArgumentParser(prog="python -m benchmarks.diagnosis.record", description=__doc__)
    ap.add_argument("names", nargs="*", help="scenario names (default: all)")
    ap.add_argument("--missing", action="store_true", help="only scenarios not recorded yet")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per scenario")
    a = ap.parse_args(argv)
    by_name = {sc["name"]: sc for sc in SCENARIOS}
    unknown = [n for n in a.names if n not in by_name]
    if unknown:
        print(f"record: error: unknown scenario(s) {', '.join(unknown)}", file=sys.stderr)
        return 2
    todo = [by_name[n] for n in a.names] if a.names else list(SCENARIOS)
    if a.missing:
        todo = [sc for sc in todo if not (RUNS / sc["name"] / "recorded.json").exists()]
    tv = _torch_version()
    failed = [sc["name"] for sc in todo if not record_one(sc, a.timeout, tv)]
    if failed:
        print(f"record: {len(failed)} failed: {' '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
