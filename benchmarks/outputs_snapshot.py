"""Every output of every command on every fixture and real trace, for byte-identical checks.

A refactor that must not change a single output (a file move, a registry, a split of a module)
runs this before and after and compares::

    python benchmarks/outputs_snapshot.py snap /tmp/before     # on the old tree
    python benchmarks/outputs_snapshot.py snap /tmp/after      # on the new tree
    python benchmarks/outputs_snapshot.py diff /tmp/before /tmp/after

Each case runs ``python -m traceoverlap ...`` in its own folder (outputs are written there by
relative name, so "wrote report.html" reads the same in both snapshots) and keeps its stdout,
stderr, exit code and every file it wrote. The inputs: every folder of ``fixtures/workloads``,
the gloo and nsys fixtures, and the real traces in ``$TRACEOVERLAP_REAL_TRACES`` (default
``../shared/real-traces``) when present. Commands: analyze in each format, report, export, both
whatif formats, a few option variants, compare of related runs in each format and as HTML.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: where the fixtures are read from: outputs name their inputs, so two checkouts compare only when
#: both read the same files (a second work tree: TRACEOVERLAP_SNAPSHOT_INPUTS=/path/to/first)
INPUTS = Path(os.environ.get("TRACEOVERLAP_SNAPSHOT_INPUTS", ROOT))
REAL = Path(os.environ.get("TRACEOVERLAP_REAL_TRACES", INPUTS.parent / "shared" / "real-traces"))


def inputs() -> dict[str, str]:
    found = {
        f"w-{p.name}": str(p)
        for p in sorted((INPUTS / "fixtures/workloads").iterdir())
        if p.is_dir()
    }
    found["gloo_collectives"] = str(INPUTS / "fixtures/gloo_collectives")
    found["nsys_fixture"] = str(INPUTS / "fixtures/nsys/bucketed_cpu_2rank.sqlite")
    real = {
        "real-dlrm": REAL / "kineto/dlrm_v100_8rank",
        "real-a100": REAL / "kineto/a100_nccl_allreduce_rank0.json.gz",
        "real-mi300x": REAL / "kineto/amd_mi300x_ddp8_resnet_actckpt_rccl_rank0.json.gz",
        "real-fsdp-nsys": REAL / "nsys/fsdp_2gpu_h100.sqlite",
    }
    found.update({k: str(v) for k, v in real.items() if v.exists()})
    return found


def cases() -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    ins = inputs()
    for name, path in ins.items():
        out += [
            (f"{name}/analyze-table", ["analyze", path]),
            (f"{name}/analyze-json", ["analyze", path, "-f", "json"]),
            (f"{name}/analyze-csv", ["analyze", path, "-f", "csv"]),
            (f"{name}/analyze-md", ["analyze", path, "-f", "markdown", "-o", "out.md"]),
            (f"{name}/report", ["report", path, "--plotlyjs", "cdn", "-o", "report.html"]),
            (f"{name}/export", ["export", path, "-o", "run.json"]),
            (f"{name}/whatif-text", ["whatif", path]),
            (f"{name}/whatif-json", ["whatif", path, "--format", "json"]),
        ]
    w = INPUTS / "fixtures/workloads"
    out += [
        ("variants/report-embed", ["report", str(w / "bucketed"), "-o", "report.html"]),
        ("variants/steps-rank", ["analyze", str(w / "slow_rank"), "--steps", "3-4", "--rank", "1"]),
        ("variants/step-regex", ["analyze", str(w / "bucketed"), "--step-regex", "^backward"]),
        (
            "variants/comm-pattern",
            ["analyze", str(w / "ddp"), "--comm-pattern", "optimizer", "-f", "json"],
        ),
        ("variants/lost", ["analyze", str(w / "naive"), "--lost-threshold", "0.5"]),
        ("variants/fail-if", ["analyze", str(w / "naive"), "--fail-if", "exposed_comm_ratio>0.01"]),
        ("variants/html", ["analyze", str(w / "slow_rank"), "--html", "a.html", "-o", "a.txt"]),
        (
            "variants/whatif-fix",
            [
                "whatif",
                str(w / "slow_rank"),
                "--scenario",
                "fix-rank:1",
                "--scenario",
                "comm-speed:2",
            ],
        ),
        ("variants/whatif-regex", ["whatif", str(w / "bucketed"), "--step-regex", "^ProfilerStep"]),
        ("variants/jobs2", ["analyze", str(w / "naive4_slow"), "-j", "2", "-f", "json"]),
        (
            "variants/report-step",
            [
                "report",
                str(w / "slow_rank"),
                "--timeline-step",
                "3",
                "--timeline-rank",
                "1",
                "--plotlyjs",
                "cdn",
                "-o",
                "r.html",
            ],
        ),
        ("variants/bad-steps", ["analyze", str(w / "naive"), "--steps", "x"]),
        ("variants/bad-scenario", ["whatif", str(w / "naive"), "--scenario", "nope"]),
        ("variants/missing", ["analyze", str(w / "does-not-exist")]),
    ]
    pairs = [
        ("naive", "bucketed"),
        ("bucketed_slow", "bucketed"),
        ("slow_rank", "bucketed"),
        ("ddp", "ddp_8"),
        ("overlap", "overlap_commoff"),
        ("naive4_slow", "naive4"),
    ]
    for a, b in pairs:
        pa, pb = str(w / a), str(w / b)
        out += [
            (f"compare-{a}-{b}/table", ["compare", pa, pb]),
            (f"compare-{a}-{b}/json", ["compare", pa, pb, "-f", "json"]),
            (f"compare-{a}-{b}/md", ["compare", pa, pb, "-f", "markdown"]),
            (f"compare-{a}-{b}/html", ["compare", pa, pb, "-o", "c.txt", "--html", "c.html"]),
        ]
    return out


def run_case(dest: Path, name: str, args: list[str]) -> str:
    folder = dest / name
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
    proc = subprocess.run(
        [sys.executable, "-m", "traceoverlap", *args],
        cwd=folder,
        capture_output=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=900,
    )
    (folder / "_stdout").write_bytes(proc.stdout)
    (folder / "_stderr").write_bytes(proc.stderr)
    (folder / "_rc").write_text(f"{proc.returncode}\n")
    return name


def snap(dest: Path, jobs: int, only: list[str] | None = None) -> None:
    todo = [c for c in cases() if not only or any(o in c[0] for o in only)]
    with ThreadPoolExecutor(jobs) as pool:
        for i, name in enumerate(pool.map(lambda c: run_case(dest, *c), todo), 1):
            print(f"[{i}/{len(todo)}] {name}", file=sys.stderr, flush=True)
    print(f"{len(todo)} cases in {dest}")


def diff(a: Path, b: Path, subset: bool = False) -> int:
    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    if subset:  # ``after`` ran some cases (snap --only): compare those
        ran = {rel.parent for rel in files_b}
        files_a = {rel for rel in files_a if rel.parent in ran}
    bad = sorted(files_a ^ files_b)
    for rel in bad:
        print(f"only in {'before' if rel in files_a else 'after'}: {rel}")
    differ = [
        rel for rel in sorted(files_a & files_b) if not filecmp.cmp(a / rel, b / rel, shallow=False)
    ]
    for rel in differ:
        print(f"differs: {rel}")
    n_cases = len({rel.parent for rel in files_a})
    print(
        f"{len(files_a & files_b) - len(differ)} of {len(files_a | files_b)} files identical "
        f"({n_cases} cases); {len(differ)} differ, {len(bad)} on one side only"
    )
    return 1 if differ or bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("snap", help="run every case into DEST")
    s.add_argument("dest", type=Path)
    s.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    s.add_argument("--only", nargs="+", metavar="TEXT", help="only the cases whose name has TEXT")
    d = sub.add_parser("diff", help="compare two snapshots byte for byte")
    d.add_argument("before", type=Path)
    d.add_argument("after", type=Path)
    d.add_argument("--subset", action="store_true", help="compare only the cases AFTER ran")
    args = parser.parse_args()
    if args.cmd == "snap":
        snap(args.dest, args.jobs, args.only)
        return 0
    return diff(args.before, args.after, args.subset)


if __name__ == "__main__":
    raise SystemExit(main())
