"""Benchmark: a corpus of traces and exports of different shapes, each against its own floor.

Run: ``python benchmarks/bench_corpus.py [--scale 1] [--repeat 3] [--only NAME ...] [--keep DIR]
[--save FILE] [--compare FILE] [--compare-with CHECKOUT] [--list]``.

One file does not show what a change costs elsewhere: an Nsight export without NCCL and with
dense NVTX got 3x slower while the benchmarked one stayed put (issue 40). So this runs a corpus,
each member built from a real trace or a bundled fixture (repeated with shifted times and
renumbered ids up to a size, ``--scale`` multiplies the sizes) or generated:

=====================  ==========================================================================
kineto/a100-nccl       the shared A100 trace (NCCL all-reduce, one GPU) repeated
kineto/mi300x-rccl     the shared MI300X trace (ROCm, RCCL, dense python_function rows) repeated
kineto/resnet50-pt18   the bundled PyTorch 1.8 trace (old schema: ``Kernel``, ``Runtime``, string
                       tids, ``external id``) repeated
kineto/dlrm-8rank      the shared 8-rank DLRM job (V100): eight rank files, each repeated
kineto/gloo-cpu-2rank  the bundled CPU workload ``bucketed`` (gloo, no GPU): two rank files
kineto/a100-8gpu       the A100 trace with its GPU rows on 8 devices of one process (each device
                       launched from its own thread), repeated: many GPUs per process
kineto/fixture-2rank   ``fixtures/workloads/bucketed`` as it is (gzip, 0.2 MB): what imports cost
nsys/fsdp-h100         the shared 2-GPU H100 FSDP export (no NCCL kernels, dense NVTX and CUDA
                       API rows) repeated inside SQLite
nsys/synthetic-2proc   ``tests/nsys_writer.py:write_synthetic``: two processes, NCCL, one
                       ``emit_nvtx`` range per kernel
nsys/cpu-2rank         ``fixtures/nsys/bucketed_cpu_2rank.sqlite`` as it is
=====================  ==========================================================================

Each member is measured, each in its own fresh process, best of ``--repeat`` by CPU (user + sys,
children included) after one untimed warm-up round, interleaved member by member:

- its floor. Kineto: ``python`` + msgspec decoding only the fields the analysis needs into
  ``gc=False`` structs, every file of the member (bench_analyze.py's floor). Nsight: one C-level
  SQLite scan of every column the reader needs (bench_nsys.py's floor);
- ``traceoverlap analyze PATHS --format json -o /dev/null -j 1`` (one process, so its CPU and
  peak RSS are comparable with the floor's), and with ``--compare-with`` the same from another
  checkout in the same rounds;
- once per run, the imports ``analyze --format json`` does before reading a byte (the modules
  of the command, numpy and pandas among them), and numpy + pandas alone: the part of every
  member's CPU that does not depend on the input.

- the same ``analyze`` once more under ``benchmarks/phases.py``, its CPU split into imports,
  the Nsight integrity check, read, per-unit analysis, reduce, output and the rest.

It prints per member: floor and analyze CPU, their ratio against the target (Kineto 1.2x,
Nsight 3x: issue 40), peak RSS, and the ratio without the imports (analyze less the imports,
against the floor less ``python`` + msgspec / sqlite3 start); under it, for a member that misses
its target, a ``why:`` line (what the target allows, what the fixed costs leave of it, the work
phase by phase against the floor's own, the ratio without pandas' import), else its phases
(``--no-phases`` skips that run). ``--save FILE`` writes the
figures as JSON; ``--compare FILE`` compares with such a file and names every member whose
ratio to its floor grew by more than 20 % (the ratio, not the seconds: the floor runs in the same
rounds, so the ratio carries over between runs of a shared machine), exit status 1 if any did.
``benchmarks/corpus_baseline.json`` is the run docs/performance.md shows ("The corpus").

Not a test: it takes minutes and its numbers depend on the machine. The corpus is built in a
temporary folder (``--keep DIR`` keeps it there and reuses what is already built).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_nsys  # noqa: E402  (also puts tests/ on sys.path: nsys_writer)
import phases as phases_mod  # noqa: E402
from bench_analyze import FLOOR_STRUCTS, REPO, Run, _child_err, _env  # noqa: E402
from nsys_writer import write_synthetic  # noqa: E402

REAL = Path(os.environ.get("TRACEOVERLAP_REAL_TRACES", str(REPO.parent / "shared" / "real-traces")))
FIXTURES = REPO / "fixtures"

#: The targets (issue 40), in floors of whole-process CPU.
TARGET = {"kineto": 1.2, "nsys": 3.0}
#: How much a member's ratio to its floor may grow against a saved run before it is named.
SLOWER = 1.20

# The Kineto floor over every file of a member (``.gz`` decompressed first): bench_analyze.py's
# minimal typed decode, ``gc=False`` structs.
KINETO_FLOOR = (
    r"""
import gzip, sys, time, msgspec
gc_flag = False
"""
    + FLOOR_STRUCTS
    + r"""dec = msgspec.json.Decoder(Trace)
n = 0
for p in sys.argv[1:]:
    with open(p, "rb") as f:
        data = f.read()
    if p.endswith(".gz"):
        data = gzip.decompress(data)
    n += len(dec.decode(data).traceEvents)
    del data
print(n)
"""
)

# What ``python -m traceoverlap analyze X --format json`` imports before it reads a byte: its
# entry point, command and the modules the analysis, the Kineto reader and the JSON report load.
IMPORTS_CODE = (
    r"""
import sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(1, """
    + repr(str(HERE))
    + r""")
import traceoverlap.__main__ as entry
entry.pause()  # as entry.run() does: the collector paused while the modules load, one BLAS thread
entry.one_thread()
import phases
phases.import_command(sys.argv[2])
import os
os._exit(0)  # as the command ends (traceoverlap.__main__.run): no teardown of the modules
"""
)
# as the command imports them: the collector paused, one OpenBLAS thread (core/_blas.py)
NUMPY_PANDAS_CODE = (
    "import gc, os; gc.disable(); os.environ.setdefault('OPENBLAS_NUM_THREADS', '1'); "
    "import numpy, pandas; os._exit(0)"
)
START_CODE = {"kineto": "import msgspec", "nsys": "import sqlite3"}
NUMPY_CODE = "import gc, os; gc.disable(); os.environ.setdefault('OPENBLAS_NUM_THREADS', '1'); import numpy; os._exit(0)"


# --- building the corpus ---------------------------------------------------------------------


def _load(path: Path) -> dict[str, Any]:
    opener: Callable[..., Any] = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        doc: dict[str, Any] = json.loads(f.read())
    return doc


_ID_ARGS = ("correlation", "External id", "external id")


def _ints(events: list[dict[str, Any]]) -> int:
    """One more than the largest flow / correlation / external id: the step between copies."""
    top = 0
    for e in events:
        if isinstance(e.get("id"), int):
            top = max(top, e["id"])
        args = e.get("args")
        if isinstance(args, dict):
            for k in _ID_ARGS:
                if isinstance(args.get(k), int):
                    top = max(top, args[k])
    return top + 1


def _shifted(ev: dict[str, Any], k: int, dt_us: float, id_step: int, step_shift: int) -> None:
    """Copy ``k`` of an event: times ``k * dt_us`` later, ids and step numbers renumbered."""
    if isinstance(ev.get("ts"), (int, float)) and ev.get("ph") != "M":
        ev["ts"] = round(ev["ts"] + k * dt_us, 3)
    if isinstance(ev.get("id"), int):
        ev["id"] += k * id_step
    args = ev.get("args")
    if isinstance(args, dict):
        for key in _ID_ARGS:
            if isinstance(args.get(key), int):
                args[key] += k * id_step
        if isinstance(args.get("external ts"), (int, float)):
            args["external ts"] = round(args["external ts"] + k * dt_us, 3)
    name = ev.get("name", "")
    if isinstance(name, str) and name.startswith("ProfilerStep#") and name[13:].isdigit():
        ev["name"] = f"ProfilerStep#{int(name[13:]) + k * step_shift}"


def repeat_kineto(doc: dict[str, Any], out: Path, target_mb: float) -> int:
    """Write ``doc`` repeated (whole copies, shifted in time, ids renumbered) until the file
    reaches ``target_mb`` MB, in Kineto's byte shape (one event over indented lines); return the
    number of events written."""
    events = doc["traceEvents"]
    timed = [e for e in events if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]
    t_min = min(e["ts"] for e in timed)
    t_max = max(e["ts"] + float(e.get("dur", 0)) for e in timed)
    dt_us = float(int(t_max - t_min) + 1000)  # copies follow each other with a 1 ms gap
    id_step = _ints(events)
    steps = [
        int(str(e["name"])[13:])
        for e in events
        if str(e.get("name", "")).startswith("ProfilerStep#") and str(e["name"])[13:].isdigit()
    ]
    step_shift = max(steps) - min(steps) + 1 if steps else 0
    meta = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    n = copies = 0
    with open(out, "w", encoding="utf-8") as f:
        f.write("{\n")
        for key, value in doc.items():
            if key != "traceEvents":
                f.write(f"  {json.dumps(key)}: {json.dumps(value)},\n")
        f.write('  "traceEvents": [\n')
        first = True
        while copies == 0 or f.tell() < target_mb * 1e6:
            for ev in (meta if copies == 0 else []) + body:
                e = json.loads(json.dumps(ev)) if copies else ev
                if copies:
                    _shifted(e, copies, dt_us, id_step, step_shift)
                f.write(("  " if first else ",\n  ") + "{\n    " + json.dumps(e)[1:-1] + "\n  }")
                first = False
                n += 1
            copies += 1
        f.write("\n  ]\n}\n")
    return n


_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
_LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}


def many_gpus(doc: dict[str, Any], devices: int) -> dict[str, Any]:
    """``doc`` (one process, one GPU) with its GPU rows on ``devices`` devices of the same
    process: device ``k``'s copy of every kernel, copy and set, launched from its own thread (the
    launch rows copied to thread ``tid + k``), correlations and flows renumbered per device."""
    events = doc["traceEvents"]
    id_step = _ints(events)
    gpu_pids = {e["pid"] for e in events if e.get("cat") in _GPU_CATS}
    launch = {(e["pid"], e["tid"]) for e in events if e.get("cat") in _LAUNCH_CATS}
    out = list(events)
    for k in range(1, devices):
        for ev in events:
            cat = ev.get("cat")
            on_gpu = cat in _GPU_CATS or (ev.get("ph") == "f" and ev.get("pid") in gpu_pids)
            launching = cat in _LAUNCH_CATS or (
                ev.get("ph") == "s" and (ev.get("pid"), ev.get("tid")) in launch
            )
            meta = ev.get("ph") == "M" and ev.get("pid") in gpu_pids
            if not (on_gpu or launching or meta):
                continue
            e = json.loads(json.dumps(ev))
            if on_gpu or meta:
                e["pid"] = e["pid"] + k if isinstance(e["pid"], int) else e["pid"]
            if launching and isinstance(e.get("tid"), int):
                e["tid"] += k
            args = e.get("args")
            if isinstance(args, dict):
                if on_gpu and isinstance(args.get("device"), int):
                    args["device"] += k
                if meta and isinstance(args.get("name"), str):
                    args["name"] = args["name"].replace("GPU 0", f"GPU {k}")
                if isinstance(args.get("correlation"), int):
                    args["correlation"] += k * id_step
            if not meta and isinstance(e.get("id"), int):
                e["id"] += k * id_step
            out.append(e)
    return {**doc, "traceEvents": out}


#: Tables with times in a real export, repeated; every other table is kept as it is.
_NSYS_TIMED = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS",
    "PROFILER_OVERHEAD",
)


def repeat_nsys(src: Path, out: Path, target_mb: float) -> int:
    """``src`` repeated inside SQLite until ``out`` reaches ``target_mb`` MB: each timed table's
    rows again ``k`` spans later, correlation ids renumbered (the issue's "repeated 55 times into
    one 108 MB file"); return the number of copies."""
    shutil.copyfile(src, out)
    os.chmod(out, 0o644)
    con = sqlite3.connect(out)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        timed = [t for t in _NSYS_TIMED if t in tables]
        cols = {t: [str(r[1]) for r in con.execute(f'PRAGMA table_info("{t}")')] for t in timed}
        lo, hi = con.execute(
            "SELECT min(s), max(e) FROM ("
            + " UNION ALL ".join(f'SELECT min(start) s, max("end") e FROM "{t}"' for t in timed)
            + ")"
        ).fetchone()
        span = int(hi - lo) + 1_000_000  # 1 ms between copies
        corr = [
            f'SELECT max(correlationId) FROM "{t}"' for t in timed if "correlationId" in cols[t]
        ]
        corr_step = max(int(con.execute(q).fetchone()[0] or 0) for q in corr) + 1
        rows = {
            t: int(con.execute(f'SELECT max(rowid) FROM "{t}"').fetchone()[0] or 0) for t in timed
        }
        copies = 1
        while out.stat().st_size < target_mb * 1e6:  # whole copies: a little above the target
            for t in timed:
                exprs = []
                for c in cols[t]:
                    if c in ("start", "end"):
                        exprs.append(f'"{c}" + {copies * span}')
                    elif c == "correlationId":
                        exprs.append(f'"{c}" + {copies * corr_step}')
                    else:
                        exprs.append(f'"{c}"')
                names = ", ".join(f'"{c}"' for c in cols[t])
                con.execute(
                    f'INSERT INTO "{t}" ({names}) SELECT {", ".join(exprs)} FROM "{t}" '
                    f"WHERE rowid <= {rows[t]}"
                )
            con.commit()
            copies += 1
    finally:
        con.close()
    return copies


@dataclass(frozen=True)
class Member:
    name: str
    kind: str  # "kineto" or "nsys"
    shape: str  # one line: what is special about it
    mb: float  # the target size at --scale 1 (0: used as it is)
    build: Callable[[Path, float], list[Path]]  # (folder, MB) -> the paths analyze is given


def _kineto_repeat(src: Path, out_name: str) -> Callable[[Path, float], list[Path]]:
    def build(folder: Path, mb: float) -> list[Path]:
        out = folder / out_name
        if not out.exists():
            repeat_kineto(_load(src), out, mb)
        return [out]

    return build


def _kineto_ranks(srcs: Callable[[], list[Path]], sub: str) -> Callable[[Path, float], list[Path]]:
    def build(folder: Path, mb: float) -> list[Path]:
        d = folder / sub
        d.mkdir(exist_ok=True)
        files = sorted(srcs())
        outs = []
        for i, src in enumerate(files):
            out = d / f"rank{i}.json"
            if not out.exists():
                repeat_kineto(_load(src), out, mb / len(files))
            outs.append(out)
        return [d]

    return build


def _eight_gpus(folder: Path, mb: float) -> list[Path]:
    out = folder / "a100_8gpu.json"
    if not out.exists():
        doc = many_gpus(_load(REAL / "kineto" / "a100_nccl_allreduce_rank0.json.gz"), 8)
        repeat_kineto(doc, out, mb)
    return [out]


def _nsys_repeat(folder: Path, mb: float) -> list[Path]:
    out = folder / "fsdp_h100_repeated.sqlite"
    if not out.exists():
        repeat_nsys(REAL / "nsys" / "fsdp_2gpu_h100.sqlite", out, mb)
    return [out]


def _nsys_synthetic(folder: Path, mb: float) -> list[Path]:
    out = folder / "synthetic_2proc.sqlite"
    if not out.exists():  # 1 M kernels ~ 155 MB (bench_nsys.py)
        write_synthetic(out, kernels=max(2000, int(mb / 155 * 1_000_000)), processes=2)
    return [out]


def _as_is(*paths: Path) -> Callable[[Path, float], list[Path]]:
    return lambda folder, mb: list(paths)


CORPUS = (
    Member(
        "kineto/a100-nccl",
        "kineto",
        "A100, NCCL, one GPU (real)",
        100,
        _kineto_repeat(REAL / "kineto" / "a100_nccl_allreduce_rank0.json.gz", "a100.json"),
    ),
    Member(
        "kineto/mi300x-rccl",
        "kineto",
        "MI300X, RCCL, dense python_function (real)",
        60,
        _kineto_repeat(
            REAL / "kineto" / "amd_mi300x_ddp8_resnet_actckpt_rccl_rank0.json.gz", "mi300x.json"
        ),
    ),
    Member(
        "kineto/resnet50-pt18",
        "kineto",
        "PyTorch 1.8 schema (old)",
        60,
        _kineto_repeat(FIXTURES / "public" / "resnet50_pt18_worker0.pt.trace.json.gz", "pt18.json"),
    ),
    Member(
        "kineto/dlrm-8rank",
        "kineto",
        "8 rank files (V100, real)",
        48,
        _kineto_ranks(
            lambda: list((REAL / "kineto" / "dlrm_v100_8rank").glob("*.json.gz")), "dlrm_8rank"
        ),
    ),
    Member(
        "kineto/gloo-cpu-2rank",
        "kineto",
        "CPU only, gloo, 2 rank files",
        24,
        _kineto_ranks(
            lambda: list((FIXTURES / "workloads" / "bucketed").glob("rank*.json.gz")), "gloo_2rank"
        ),
    ),
    Member("kineto/a100-8gpu", "kineto", "8 GPUs in one process", 40, _eight_gpus),
    Member(
        "kineto/fixture-2rank",
        "kineto",
        "2 small rank files as they are (imports)",
        0,
        _as_is(FIXTURES / "workloads" / "bucketed"),
    ),
    Member("nsys/fsdp-h100", "nsys", "2 GPUs, no NCCL, dense NVTX (real)", 50, _nsys_repeat),
    Member("nsys/synthetic-2proc", "nsys", "2 processes, NCCL, emit_nvtx", 50, _nsys_synthetic),
    Member(
        "nsys/cpu-2rank",
        "nsys",
        "CPU only, 2 ranks, as it is",
        0,
        _as_is(FIXTURES / "nsys" / "bucketed_cpu_2rank.sqlite"),
    ),
)


# --- measuring -------------------------------------------------------------------------------


def _files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(q for q in p.iterdir() if q.name.endswith((".json", ".json.gz")))
        else:
            out.append(p)
    return out


def _commands(
    member: Member, paths: list[Path], compare: Path | None, phases: bool = True
) -> dict[str, tuple[list[str], Path]]:
    py = sys.executable
    files = _files(paths)
    if member.kind == "kineto":
        floor = [py, "-c", KINETO_FLOOR, *map(str, files)]
    else:
        needed = {t: c for t, c in bench_nsys._needed(files[0]).items() if c}  # tables it has
        floor = [py, "-c", bench_nsys.FLOOR_CODE, str(files[0]), str(needed)]
    cmds = {"floor": (floor, REPO)}
    argv = [py, "-m", "traceoverlap", "analyze", *map(str, paths), "--format", "json"]
    argv += ["-o", os.devnull, "-j", "1"]
    cmds["analyze"] = (argv, REPO)
    if compare is not None:
        cmds["analyze_other"] = (argv, compare)
    if phases:  # the same command once more, its CPU split by phase (benchmarks/phases.py)
        script = [py, str(HERE / "phases.py"), "--checkout", str(REPO), "--json"]
        cmds["phases"] = ([*script, "--kind", member.kind, "--", *argv[3:]], REPO)
    return cmds


def _run(argv: list[str], checkout: Path, cwd: str) -> Run:
    run, err = _child_err(argv, _env(checkout), cwd)
    run.phases = phases_mod.parse(err)
    return run


def _best(runs: list[Run]) -> Run:
    return min(runs, key=lambda r: r.cpu)


def measure_fixed(repeat: int, compare: Path | None, cwd: str) -> dict[str, float]:
    """CPU s of the parts every member pays: python, + msgspec, + sqlite3, numpy + pandas, and
    the imports of ``analyze --format json`` (per checkout)."""
    py = sys.executable
    cmds: dict[str, tuple[list[str], Path]] = {
        "python": ([py, "-c", "pass"], REPO),
        "start_kineto": ([py, "-c", START_CODE["kineto"]], REPO),
        "start_nsys": ([py, "-c", START_CODE["nsys"]], REPO),
        "numpy_pandas": ([py, "-c", NUMPY_PANDAS_CODE], REPO),
        "numpy": ([py, "-c", NUMPY_CODE], REPO),
    }
    for kind in ("kineto", "nsys"):
        cmds[f"imports_{kind}"] = ([py, "-c", IMPORTS_CODE, str(REPO), kind], REPO)
        if compare is not None:
            argv = [py, "-c", IMPORTS_CODE, str(compare), kind]
            cmds[f"imports_{kind}_other"] = (argv, compare)
    runs: dict[str, list[Run]] = {k: [] for k in cmds}
    for round_ in range(repeat + 1):
        for key, (argv, checkout) in cmds.items():
            r = _run(argv, checkout, cwd)
            if round_:
                runs[key].append(r)
    return {k: _best(v).cpu for k, v in runs.items()}


def measure(
    member: Member,
    paths: list[Path],
    repeat: int,
    compare: Path | None,
    cwd: str,
    phases: bool = True,
) -> dict[str, Run]:
    cmds = _commands(member, paths, compare, phases)
    runs: dict[str, list[Run]] = {k: [] for k in cmds}
    for round_ in range(repeat + 1):
        for key, (argv, checkout) in cmds.items():
            r = _run(argv, checkout, cwd)
            if round_:  # round 0 warms the bytecode caches and the page cache
                runs[key].append(r)
    return {k: _best(v) for k, v in runs.items()}


def _size_mb(paths: list[Path]) -> float:
    return sum(p.stat().st_size for p in _files(paths)) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every member's size")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; best is kept")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="members whose name contains NAME")
    ap.add_argument("--keep", type=Path, help="build the corpus here and keep it")
    ap.add_argument("--save", type=Path, help="write this run's figures (JSON)")
    ap.add_argument("--compare", type=Path, help="name each member > 20 %% slower than FILE's")
    ap.add_argument("--compare-with", type=Path, help="another source checkout to run alongside")
    ap.add_argument("--list", action="store_true", help="list the corpus and exit")
    ap.add_argument("--build-only", action="store_true", help="build the corpus (--keep) only")
    ap.add_argument(
        "--no-phases", action="store_true", help="skip the run split by phase (the why lines)"
    )
    opts = ap.parse_args()
    members = [m for m in CORPUS if not opts.only or any(s in m.name for s in opts.only)]
    if opts.list:
        for m in members:
            print(f"{m.name:22s} {m.mb * opts.scale:6.0f} MB  {m.shape}")
        return
    compare = opts.compare_with.resolve() if opts.compare_with else None
    tmp = None
    if opts.keep:
        opts.keep.mkdir(parents=True, exist_ok=True)
        folder = opts.keep
    else:
        tmp = tempfile.TemporaryDirectory()
        folder = Path(tmp.name)
    results: dict[str, Any] = {"members": {}}
    try:
        built: dict[str, list[Path]] = {}
        for m in members:
            t0 = time.perf_counter()
            built[m.name] = m.build(folder, m.mb * opts.scale)
            print(
                f"built {m.name}: {_size_mb(built[m.name]):.1f} MB "
                f"in {time.perf_counter() - t0:.1f} s",
                flush=True,
            )
        if opts.build_only:
            return
        with tempfile.TemporaryDirectory() as cwd:
            fixed = measure_fixed(opts.repeat, compare, cwd)
            results["fixed"] = fixed
            print(
                f"\nfixed costs (CPU s, best of {opts.repeat}): python {fixed['python']:.3f}, "
                f"+ msgspec {fixed['start_kineto']:.3f}, + sqlite3 {fixed['start_nsys']:.3f}; "
                f"numpy + pandas {fixed['numpy_pandas']:.3f}; the imports of analyze --format "
                f"json: Kineto {fixed['imports_kineto']:.3f}, Nsight {fixed['imports_nsys']:.3f}"
                + (
                    f" (--compare-with: {fixed['imports_kineto_other']:.3f}, "
                    f"{fixed['imports_nsys_other']:.3f})"
                    if compare
                    else ""
                )
            )
            head = (
                f"\n{'member':22s} {'MB':>6s} {'floor s':>8s} {'analyze s':>9s} {'ratio':>6s} "
                f"{'target':>7s} {'':6s} {'RSS MB':>7s} {'floor MB':>8s} {'w/o imp':>7s}"
            )
            if compare:
                head += f" {'other s':>8s} {'ratio':>6s}"
            print(head, flush=True)
            for m in members:
                runs = measure(m, built[m.name], opts.repeat, compare, cwd, not opts.no_phases)
                row, line = _member_row(m, built[m.name], runs, fixed, compare)
                results["members"][m.name] = row
                print(line, flush=True)
    finally:
        if tmp is not None:
            tmp.cleanup()
    if opts.save:
        opts.save.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        print(f"\nsaved {opts.save}")
    if opts.compare:
        sys.exit(_compare(results, json.loads(opts.compare.read_text()), opts.compare))


def _member_row(
    m: Member,
    paths: list[Path],
    runs: dict[str, Run],
    fixed: dict[str, float],
    compare: Path | None,
) -> tuple[dict[str, Any], str]:
    """A member's figures (saved with --save) and its printed line(s)."""
    floor, ana = runs["floor"], runs["analyze"]
    ratio = ana.cpu / floor.cpu
    target = TARGET[m.kind]
    start = fixed[f"start_{m.kind}"]
    # the ratio beyond the fixed costs, where the floor's own work is measurable
    work = floor.cpu - start
    bare = (ana.cpu - fixed[f"imports_{m.kind}"]) / work if work > 0.02 else None
    row: dict[str, Any] = {
        "mb": _size_mb(paths),
        "floor_cpu": floor.cpu,
        "analyze_cpu": ana.cpu,
        "ratio": ratio,
        "target": target,
        "rss_mb": ana.rss_mb,
        "floor_rss_mb": floor.rss_mb,
        "ratio_without_imports": bare,
    }
    line = (
        f"{m.name:22s} {row['mb']:6.1f} {floor.cpu:8.3f} {ana.cpu:9.3f} "
        f"{ratio:5.2f}x {target:6.1f}x {'met' if ratio <= target else 'MISSED':6s} "
        f"{ana.rss_mb:7.0f} {floor.rss_mb:8.0f} "
        + (f"{bare:6.2f}x" if bare is not None else f"{'-':>7s}")
    )
    if compare:
        other = runs["analyze_other"]
        row["other_cpu"] = other.cpu
        row["other_rss_mb"] = other.rss_mb
        line += f" {other.cpu:8.3f} {other.cpu / floor.cpu:5.2f}x"
    ph = runs["phases"].phases if "phases" in runs else None
    if ph is not None:
        row["phases"] = ph
        pandas_s = fixed["numpy_pandas"] - fixed["numpy"]
        line += "\n  " + (
            f"why: {why(ph, floor.cpu, target, start, pandas_s)}"
            if ratio > target
            else "phases: " + _phase_list(ph, phases_mod.PHASES)
        )
    return row, line


WORK = ("read", "units", "reduce", "output", "other")


def _phase_list(ph: dict[str, float], names: tuple[str, ...]) -> str:
    return ", ".join(f"{p} {ph[p]:.3f}" for p in names if ph.get(p, 0.0) >= 0.0005)


def why(ph: dict[str, float], floor: float, target: float, start: float, pandas_s: float) -> str:
    """Why a member misses its target, from its phases (benchmarks/phases.py, CPU s): what the
    target allows (``target`` x the ``floor``), what the fixed costs (the imports, the Nsight
    integrity check) leave of it, what the work took phase by phase against the floor's own work
    (the floor less its interpreter start, ``start``), and the ratio the member would have
    without pandas' import (``pandas_s``: numpy + pandas less numpy)."""
    budget = target * floor
    fixed = ph["imports"] + ph["integrity"]
    paid = f"imports {ph['imports']:.3f} s (pandas {pandas_s:.3f})"
    if ph["integrity"] >= 0.0005:
        paid += f" + the integrity check {ph['integrity']:.3f}"
    work = ph["total"] - fixed
    without = (ph["total"] - pandas_s) / floor
    own = floor - start
    tail = (
        f"the work took {work:.3f} ({_phase_list(ph, WORK)}), the floor's own "
        + (f"{own:.3f}" if own >= 0.005 else "too small to measure")
        + f"; without pandas' import {without:.2f}x"
    )
    if fixed >= budget:
        return f"{paid} alone exceed the {budget:.3f} s that {target:g}x allows; {tail}"
    largest = max(WORK, key=lambda p: ph.get(p, 0.0))
    return (
        f"{paid} leave {budget - fixed:.3f} of the {budget:.3f} s that {target:g}x allows; "
        f"{tail}; the largest part: {largest}"
    )


def _compare(now: dict[str, Any], before: dict[str, Any], where: Path) -> int:
    """Name every member whose ratio to its floor grew by more than 20 % since ``before``."""
    print(f"\nagainst {where} (ratio to the floor, now / then):")
    slower = []
    for name, row in now["members"].items():
        old = before.get("members", {}).get(name)
        if old is None:
            print(f"  {name:22s} not in the saved run")
            continue
        change = row["ratio"] / old["ratio"]
        flag = "SLOWER by more than 20 %" if change > SLOWER else "ok"
        print(f"  {name:22s} {old['ratio']:5.2f}x -> {row['ratio']:5.2f}x ({change:.2f}) {flag}")
        if change > SLOWER:
            slower.append(name)
    if slower:
        print(f"slower by more than 20 %: {', '.join(slower)}")
        return 1
    print("no member is more than 20 % slower")
    return 0


if __name__ == "__main__":
    main()
