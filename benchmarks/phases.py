"""Where one ``traceoverlap`` command spends its CPU, phase by phase, in one fresh process.

Run: ``python benchmarks/phases.py [--checkout DIR] [--json] -- analyze PATHS... --format json
-o /dev/null -j 1``. It runs the command as ``python -m traceoverlap`` does (in this process:
give ``-j 1``, or the map's workers are not counted) with a few functions wrapped from the
outside, and prints the process CPU (user + sys) of each phase:

=========  ================================================================================
imports    the interpreter's start and every module loaded before the command reads a byte
           (the entry point, the CLI, the analysis, the readers, the JSON report)
integrity  Nsight only: SQLite's ``PRAGMA quick_check`` of each export (one scan of the file)
read       the readers (``read_trace``, ``split_units``, the Nsight process listing), less the
           integrity check
units      the per-unit analysis (``map_file``), less its reads
reduce     the cross-rank reduce (``run.analysis._reduce``)
output     the report's building, encoding and writing (the JSON reporter, ``write_text``)
other      the rest: option parsing, merging the units, the what-if graph, the exit
=========  ================================================================================

Each phase is the CPU spent inside its functions less the CPU of any wrapped function they call,
so the phases add up to the total. Not a test and no profiler: the wrappers cost microseconds
per call, and there are a few calls per unit. ``bench_corpus.py`` runs it for every member to
say why a member misses its target.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

#: the phases in the order they are printed
PHASES = ("imports", "integrity", "read", "units", "reduce", "output", "other")

#: (module, function, phase) wrapped from the outside; a module missing from a checkout (an
#: older one, for --compare-with) is skipped
WRAPPED = (
    ("traceoverlap.readers.nsys._open", "_quick_check", "integrity"),
    ("traceoverlap.readers", "read_trace", "read"),
    ("traceoverlap.readers.paths", "_split", "read"),
    ("traceoverlap.rank.unit", "split_units", "read"),
    ("traceoverlap.rank.unit", "map_file", "units"),
    ("traceoverlap.run.analysis", "map_file", "units"),
    ("traceoverlap.run.analysis", "_reduce", "reduce"),
    ("traceoverlap.reporters.json_report", "to_dict", "output"),
    ("traceoverlap.reporters.json_report", "encode", "output"),
    ("traceoverlap.cli._common", "write_text", "output"),
)


class Clock:
    """CPU per phase, exclusive of nested wrapped calls."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self._inner: list[float] = []

    def wrap(self, fn: Callable[..., Any], phase: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.process_time()
            self._inner.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                took = time.process_time() - t0
                inner = self._inner.pop()
                self.spent[phase] = self.spent.get(phase, 0.0) + took - inner
                if self._inner:
                    self._inner[-1] += took

        timed.__wrapped__ = fn  # type: ignore[attr-defined]
        return timed


def phases(imports: float, spent: dict[str, float], total: float) -> dict[str, float]:
    """Every phase of :data:`PHASES` (0 where nothing ran), ``other`` the rest of ``total``."""
    out = {p: 0.0 for p in PHASES}
    out["imports"] = imports
    for p, s in spent.items():
        out[p] += s
    out["other"] = max(0.0, total - sum(v for k, v in out.items() if k != "other"))
    out["total"] = total
    return out


def import_command(kind: str) -> None:
    """What ``python -m traceoverlap analyze X --format json`` loads before it reads a byte
    (``bench_corpus.py`` measures these alone)."""
    import importlib

    from traceoverlap.cli import main

    main.commands["analyze"]  # noqa: B018 - the command's module is loaded on first access
    for m in (
        "traceoverlap.run.gate",
        "traceoverlap.run.analysis",
        "traceoverlap.reporters.json_report",
        *(
            ("traceoverlap.readers.kineto._document", "traceoverlap.readers.kineto._table")
            if kind == "kineto"
            else ("traceoverlap.readers.nsys",)
        ),
    ):
        importlib.import_module(m)


def child(argv: list[str], kind: str, as_json: bool) -> None:
    """Run the command in this process, its phases to stderr at exit."""
    import importlib

    import traceoverlap.__main__ as entry

    entry.pause()
    entry.one_thread()
    import_command(kind)
    imports = time.process_time()
    clock = Clock()
    for mod_name, fn_name, phase in WRAPPED:
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:
            continue
        fn = getattr(mod, fn_name, None)
        if fn is not None:
            setattr(mod, fn_name, clock.wrap(fn, phase))

    def report() -> None:
        out = phases(imports, clock.spent, time.process_time())
        if as_json:
            sys.stderr.write("PHASES=" + json.dumps(out, sort_keys=True) + "\n")
        else:
            sys.stderr.write(table(out) + "\n")
        sys.stderr.flush()

    atexit.register(report)
    sys.argv = ["traceoverlap", *argv]
    entry.run()


def table(p: dict[str, float]) -> str:
    """One line per phase: CPU s and share of the total."""
    total = p["total"] or 1.0
    rows = [f"{k:10s} {p[k]:7.3f} s {100 * p[k] / total:5.1f} %" for k in PHASES]
    return "\n".join([*rows, f"{'total':10s} {p['total']:7.3f} s"])


def parse(stderr: str) -> dict[str, float] | None:
    """The phases a child printed with ``--json`` (None if it printed none)."""
    for line in stderr.splitlines():
        if line.startswith("PHASES="):
            out: dict[str, float] = json.loads(line.split("=", 1)[1])
            return out
    return None


def main() -> None:
    import argparse  # here: bench_corpus.py imports this module in the imports it measures

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkout", type=Path, default=REPO, help="the source tree to import")
    ap.add_argument("--json", action="store_true", help="print PHASES={...} on stderr")
    ap.add_argument(
        "--kind", choices=("kineto", "nsys"), default=None, help="the reader (default: guessed)"
    )
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- analyze PATHS ... -j 1")
    opts = ap.parse_args()
    argv = [a for a in opts.command if a != "--"] if opts.command[:1] == ["--"] else opts.command
    if not argv:
        ap.error("give the command after --, e.g. -- analyze trace.json --format json -j 1")
    kind = opts.kind or (
        "nsys" if any(a.endswith((".sqlite", ".nsys-rep")) for a in argv) else "kineto"
    )
    sys.path.insert(0, str(opts.checkout.resolve()))
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    child(argv, kind, opts.json)


if __name__ == "__main__":
    main()
