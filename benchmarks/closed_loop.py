"""The what-if closed loop on fresh runs of the reference workloads (docs/whatif.md §5).

Run: ``python benchmarks/closed_loop.py [--cases naive,ddp,tp] [--repeat 2] [--out DIR]
[--backend nccl] [-- EXTRA WORKLOAD ARGS]`` (needs torch: the ``workloads`` extra).

For each straggler case it runs the workload twice per generation, with a planted straggler
(``--slow-rank R --slow-ms X --slow-phase P``) and without it, alternating which goes first
(slow then baseline, baseline then slow, ...) so that a machine drifting over the minutes
favours neither. From the slow run it predicts, with ``fix-rank:R`` (and ``no-straggler`` on 4
or more ranks), the run without the straggler, and compares that with the baseline it measured:
per step the mean over ranks, the median over steps (the ``replay`` figure of ``traceoverlap
whatif``). Each prediction is compared with its own generation's baseline and with the median of
every baseline step of the case (the reruns pooled: a machine whose runs differ from rerun to
rerun makes that the fairer reference; the tool's note says so where it sees it).

Beside each run it prints the time a transfer (after the last arrival) was under way per step
(``transfer_busy_ns``, mean over ranks, median over steps): the part of the step the what-if
keeps as the trace shows it. Where the slow run's transfers and the baseline's differ, the
prediction differs by as much (docs/whatif.md, Measured: gloo on a VM stalls at random).

Tax cases run the workload with and without ``--comm off`` and compare the overlapped run's
compute less its overlap tax with the comm-off run's compute (§5: within 25 %).

Prints one table; ``--json FILE`` writes every figure. Not a test: it measures the machine as
much as the tool, and prints figures rather than passing or failing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from traceoverlap import analyze
from traceoverlap.whatif.replay import observed_params
from traceoverlap.whatif.scenarios import load_graph, transfer_busy_ns, what_if

MS = 1e6


@dataclass(frozen=True)
class Straggler:
    args: tuple[str, ...]
    world: int
    rank: int
    ms: int
    phase: str


STRAGGLERS: dict[str, Straggler] = {
    # the committed fixtures' commands (fixtures/workloads/README.md), one straggler each
    "naive": Straggler(
        ("--strategy", "naive", "--model", "mlp", "--batch-size", "512"), 2, 1, 40, "pre-backward"
    ),
    "naive4": Straggler(
        ("--strategy", "naive", "--model", "mlp", "--batch-size", "512"), 4, 1, 40, "pre-backward"
    ),
    "bucketed": Straggler(
        (
            "--strategy",
            "bucketed",
        ),
        2,
        1,
        40,
        "pre-backward",
    ),
    "ddp": Straggler(
        (
            "--strategy",
            "ddp",
        ),
        2,
        0,
        25,
        "optimizer",
    ),
    "tp": Straggler(
        (
            "--strategy",
            "tp",
        ),
        4,
        3,
        40,
        "forward",
    ),
    "moe": Straggler(
        (
            "--strategy",
            "moe",
        ),
        4,
        2,
        30,
        "forward",
    ),
    "fsdp": Straggler(
        (
            "--strategy",
            "fsdp",
        ),
        2,
        1,
        30,
        "forward",
    ),
}
TAX: dict[str, tuple[str, ...]] = {
    "overlap-tax": ("--strategy", "overlap"),
    "ddp-tax": ("--strategy", "ddp"),
}


def _workload(out: Path, args: list[str], log: Path) -> None:
    cmd = [sys.executable, "-m", "traceoverlap_workloads", *args, "--out", str(out)]
    with log.open("w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        sys.exit(f"closed_loop: workload failed (exit {rc}): {' '.join(cmd)}; see {log}")


def _load1() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def _run_figures(folder: Path, scenarios: list[str]) -> dict[str, Any]:
    g = load_graph(folder)
    w = what_if(g, ["replay", *scenarios])
    busy, has = transfer_busy_ns(g, observed_params(g))
    # per step the mean over ranks (ranks without a transfer there count 0), median over steps
    steps_with = has.any(axis=0)
    per_step = busy.mean(axis=0)[steps_with] / MS
    return {
        "step_ms": (w.scenarios[0].step_ns or 0.0) / MS,
        "steps_ms": [s / MS for s in w.scenarios[0].steps_ns if s is not None],
        "transfer_ms": float(np.median(per_step)) if per_step.size else 0.0,
        "predicted_ms": {s.name: (s.step_ns or 0.0) / MS for s in w.scenarios[1:]},
        "identity_max_error_ratio": w.max_error_ratio,
    }


def _compute_ms(folder: Path) -> np.ndarray:
    a = analyze(folder)
    out: np.ndarray = a.steps.groupby("step", sort=False)["compute_ns"].mean().to_numpy() / MS
    return out


def _pct(pred: float, meas: float) -> str:
    return f"{(pred - meas) / meas * 100:+.0f}%" if meas else "n/a"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--cases",
        default=",".join([*STRAGGLERS, *TAX]),
        help="comma-separated: " + ", ".join([*STRAGGLERS, *TAX]),
    )
    ap.add_argument("--repeat", type=int, default=1, help="generations of each pair")
    ap.add_argument("--steps", type=int, default=8, help="profiled steps a run (>= 8 for §5)")
    ap.add_argument("--backend", default=None, help="gloo (CPU) or nccl (one GPU per rank)")
    ap.add_argument("--out", type=Path, default=None, help="keep the traces here")
    ap.add_argument("--json", type=Path, default=None, help="write every figure here")
    ap.add_argument("extra", nargs=argparse.REMAINDER, help="-- then extra workload arguments")
    ns = ap.parse_args()
    cases = [c for c in ns.cases.split(",") if c]
    unknown = [c for c in cases if c not in STRAGGLERS and c not in TAX]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}")
    extra = [a for a in ns.extra if a != "--"]
    common = ["--steps", str(ns.steps), "--warmup", "1", "--wait", "1", *extra]
    if ns.backend:
        common += ["--backend", ns.backend]
    root = ns.out or Path(tempfile.mkdtemp(prefix="closed_loop_"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"closed loop: {', '.join(cases)}; {ns.repeat} generation(s); traces in {root}")
    record: dict[str, Any] = {"cases": {}}
    for case in cases:
        gens: list[dict[str, Any]] = []
        for gen in range(ns.repeat):
            if case in STRAGGLERS:
                c = STRAGGLERS[case]
                base_args = [*c.args, "--world-size", str(c.world), *common]
                slow_args = [
                    *base_args,
                    "--slow-rank",
                    str(c.rank),
                    "--slow-ms",
                    str(c.ms),
                    "--slow-phase",
                    c.phase,
                ]
                runs = [("slow", slow_args), ("base", base_args)]
            else:
                base_args = [*TAX[case], "--world-size", "2", *common]
                runs = [("on", base_args), ("off", [*base_args, "--comm", "off"])]
            if gen % 2:
                runs.reverse()
            done: dict[str, Path] = {}
            loads = []
            for tag, args in runs:
                folder = root / f"{case}-{gen}-{tag}"
                loads.append(_load1())
                t0 = time.perf_counter()
                _workload(folder, args, root / f"{case}-{gen}-{tag}.log")
                print(f"  {folder.name}: ran in {time.perf_counter() - t0:.1f} s", flush=True)
                done[tag] = folder
            if case in STRAGGLERS:
                c = STRAGGLERS[case]
                sc = [f"fix-rank:{c.rank}"] + (["no-straggler"] if c.world >= 4 else [])
                gens.append(
                    {
                        "slow": _run_figures(done["slow"], sc),
                        "base": _run_figures(done["base"], []),
                        "load1": loads,
                    }
                )
            else:
                w = what_if(load_graph(done["on"]), ["replay"])
                tax = np.array([t or 0.0 for t in w.tax_steps_ns]) / MS
                on = _compute_ms(done["on"])
                gens.append(
                    {
                        "compute_ms": float(np.median(on)),
                        "predicted_ms": float(np.median(on - tax)) if tax.size == on.size else None,
                        "commoff_ms": float(np.median(_compute_ms(done["off"]))),
                        "tax_ms": float(np.median(tax)) if tax.size else 0.0,
                        "load1": loads,
                    }
                )
        record["cases"][case] = gens
        _print_case(case, gens)
    if ns.json:
        ns.json.write_text(json.dumps(record, indent=1))
        print(f"figures: {ns.json}")


def _print_case(case: str, gens: list[dict[str, Any]]) -> None:
    print(f"\n{case}")
    if case in TAX:
        for i, g in enumerate(gens):
            p = g["predicted_ms"]
            print(
                f"  gen {i}: compute {g['compute_ms']:.2f} ms, tax {g['tax_ms']:.2f} ms a step, "
                f"predicted {p:.2f} against comm-off {g['commoff_ms']:.2f}: "
                f"{_pct(p, g['commoff_ms'])} (as it ran: {_pct(g['compute_ms'], g['commoff_ms'])})"
                if p is not None
                else f"  gen {i}: no per-step tax"
            )
        return
    pooled = statistics.median(s for g in gens for s in g["base"]["steps_ms"])
    each = ", ".join(f"{g['base']['step_ms']:.1f}" for g in gens)
    print(f"  baseline: {each} ms (pooled median of every step: {pooled:.1f})")
    for i, g in enumerate(gens):
        s, b = g["slow"], g["base"]
        preds = "  ".join(
            f"{n} {v:.1f} ({_pct(v, b['step_ms'])}; pooled {_pct(v, pooled)})"
            for n, v in s["predicted_ms"].items()
        )
        print(
            f"  gen {i}: slow {s['step_ms']:.1f} ms, base {b['step_ms']:.1f}; {preds}; "
            f"transfer a step slow {s['transfer_ms']:.1f} / base {b['transfer_ms']:.1f} ms; "
            f"load {' / '.join(f'{x:.1f}' for x in g['load1'])}"
        )


if __name__ == "__main__":
    main()
