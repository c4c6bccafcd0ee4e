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

``--within`` (docs/whatif.md §5, the check that survives a noisy host): one run per repeat, the
cause planted in alternate steps only (``--slow-every 2``: the straggler sleeps in the even
steps; ``--comm alternate``: communication off in the even steps), the planted steps found by
their ``planted_step:*`` range (traceoverlap_workloads.plant). Straggler cases: each scenario
(``fix-rank:R`` and ``no-straggler``) predicts the planted
steps from their own trace, per step the mean over ranks, the median over the planted steps; the
measurement is the median of the clean steps of the same run (observed, mean over ranks). Tax
cases: the tax is computed as on a run without steps free of communication (those steps left
out of its references: ``tax_table(g, usable)``); the compute of the steps with communication
less that tax (per step the mean over ranks, median over steps) predicts the compute of the
steps without (median); the tax is also set against the slowdown it claims to be (compute with
less compute without). Per case and scenario: the error's median, min and max over repeats::

    python benchmarks/closed_loop.py --within --cases naive,bucketed,ddp,naive4,pipeline \
        --repeat 3 --steps 8
    python benchmarks/closed_loop.py --within --cases ddp-tax,bucketed-tax --repeat 3
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
from traceoverlap.whatif.graph import RunGraph
from traceoverlap.whatif.replay import observed_params
from traceoverlap.whatif.scenarios import load_graph, transfer_busy_ns, what_if
from traceoverlap.whatif.tax import quiet_windows, tax_table

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
    # a long last stage: it sleeps in each of its 4 micro-batches' forward, 10 ms each
    "pipeline": Straggler(("--strategy", "pipeline"), 2, 1, 10, "forward"),
    "pipeline4": Straggler(("--strategy", "pipeline"), 4, 3, 10, "forward"),
}
TAX: dict[str, tuple[str, ...]] = {
    "overlap-tax": ("--strategy", "overlap"),
    "ddp-tax": ("--strategy", "ddp"),
    "bucketed-tax": ("--strategy", "bucketed"),
}
PLANTED_PREFIX = "planted_step:"


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
    ap.add_argument(
        "--within",
        action="store_true",
        help="the within-run closed loop: the cause in alternate steps of one run (module doc)",
    )
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
    if ns.within:
        _within(cases, ns.repeat, common, root, ns.json)
        return
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


# --- within one run ---------------------------------------------------------------------------


def planted_steps(folder: Path) -> dict[str, set[str]]:
    """Per planted mark (``planted_step:slow``...): the step labels (``ProfilerStep#N``: "N") it
    opens, read from rank 0's trace (every rank marks the same steps)."""
    import gzip

    path = folder / "rank0.json.gz"
    with gzip.open(path, "rt") as f:
        ev = json.load(f).get("traceEvents", [])
    steps = sorted(
        (int(e["ts"]), str(e["name"]).split("#", 1)[1])
        for e in ev
        if str(e.get("name", "")).startswith("ProfilerStep#") and "ts" in e
    )
    starts = [t for t, _ in steps]
    out: dict[str, set[str]] = {}
    for e in ev:
        name = str(e.get("name", ""))
        if not name.startswith(PLANTED_PREFIX) or "ts" not in e:
            continue
        j = int(np.searchsorted(starts, int(e["ts"]), side="right")) - 1
        if j >= 0:
            out.setdefault(name, set()).add(steps[j][1])
    return out


def _err(pred: float | None, meas: float | None) -> float | None:
    return None if pred is None or not meas else (pred - meas) / meas


def _median_of(values: list[float | None], mask: list[bool]) -> float | None:
    v = [x for x, m in zip(values, mask, strict=True) if m and x is not None]
    return float(statistics.median(v)) if v else None


def within_straggler(folder: Path, c: Straggler) -> dict[str, Any]:
    """One run with the straggler in the even steps: each scenario's prediction for the planted
    steps against the clean steps' measurement (module doc)."""
    marks = planted_steps(folder)
    planted = marks.get(PLANTED_PREFIX + "slow", set())
    g = load_graph(folder)
    # no-straggler on every case: of two ranks its median is the faster one's (the lower middle
    # value, docs/whatif.md §3), no longer their mean
    sc = [f"fix-rank:{c.rank}", "no-straggler"]
    w = what_if(g, ["replay", *sc])
    is_p = [lbl in planted for lbl in w.step_labels]
    is_c = [not p for p in is_p]
    clean = _median_of(list(w.observed_ns), is_c)
    slow = _median_of(list(w.observed_ns), is_p)
    out: dict[str, Any] = {
        "planted_steps": sorted(planted, key=int),
        "clean_ms": clean / MS if clean else None,
        "planted_ms": slow / MS if slow else None,
        "planted_err": _err(slow, clean),
        "identity_max_error_ratio": w.max_error_ratio,
        "scenarios": {},
    }
    for s in w.scenarios[1:]:
        pred = _median_of(list(s.steps_ns), is_p)
        # the clean steps replayed with the same change: what the change does where nothing
        # was planted (0 for a perfect fix)
        pred_clean = _median_of(list(s.steps_ns), is_c)
        out["scenarios"][s.name.split(":")[0] if s.name.startswith("fix-rank") else s.name] = {
            "name": s.name,
            "predicted_ms": pred / MS if pred else None,
            "err": _err(pred, clean),
            "paired_err": _paired(list(s.steps_ns), list(w.observed_ns), is_p),
            "clean_replayed_err": _err(pred_clean, clean),
        }
    return out


def _paired(pred: list[float | None], obs: list[float | None], planted: list[bool]) -> float | None:
    """Each planted step's prediction against the mean of its clean neighbours (the steps just
    before and after: the same seconds of the run), the median over planted steps: the error
    with the machine's drift over the run taken out."""
    errs = []
    for k, p in enumerate(planted):
        if not p or pred[k] is None:
            continue
        near = [
            obs[j]
            for j in (k - 1, k + 1)
            if 0 <= j < len(obs) and not planted[j] and obs[j] is not None
        ]
        e = _err(pred[k], float(np.mean(near)) if near else None)  # type: ignore[arg-type]
        if e is not None:
            errs.append(e)
    return float(statistics.median(errs)) if errs else None


def _step_matrix(g: RunGraph, a: Any, col: str) -> np.ndarray:
    """``a.steps[col]`` as a (unit, global step) matrix of the graph (NaN where absent)."""
    nu, ns = g.win_start_ns.shape
    m = np.full((nu, ns), np.nan)
    win = {lbl: k for k, lbl in enumerate(g.step_labels)}
    unit_of = {int(r): u for u, r in enumerate(g.unit_rank.tolist())}
    for r, st, v in zip(a.steps["rank"], a.steps["step"], a.steps[col], strict=True):
        u, k = unit_of.get(int(r)), win.get(str(st))
        if u is not None and k is not None:
            m[u, k] = float(v)
    return m


def within_tax(folder: Path) -> dict[str, Any]:
    """One run with communication off in the even steps: the tax as a run without such steps
    would give it, predicting the compute of the steps without communication (module doc)."""
    g = load_graph(folder)
    quiet = quiet_windows(g)  # (unit, step): ran without communication
    inw = g.window >= 0
    usable = np.ones(g.start_ns.size, dtype=bool)
    usable[inw] = ~quiet[g.unit[inw], g.window[inw]]
    est = tax_table(g, usable)  # references from the steps with communication only
    meas = tax_table(g)  # references from every step: the in-run measurement
    a = analyze(folder)
    comp = _step_matrix(g, a, "compute_ns")
    on_cols = ~quiet.any(axis=0) & (g.win_start_ns >= 0).all(axis=0)
    off_cols = quiet.all(axis=0)
    c_on = np.nanmean(comp[:, on_cols], axis=0)
    c_off = np.nanmean(comp[:, off_cols], axis=0)
    t_est = est.step_tax_ns[:, on_cols].mean(axis=0)
    t_meas = meas.step_tax_ns[:, on_cols].mean(axis=0)
    on, off = float(np.median(c_on)), float(np.median(c_off))
    pred = float(np.median(c_on - t_est))
    slowdown = on - off
    basis = est.basis.as_dict() if est.basis is not None else {}
    return {
        "steps_on": int(on_cols.sum()),
        "steps_off": int(off_cols.sum()),
        "compute_on_ms": on / MS,
        "compute_off_ms": off / MS,
        "tax_estimated_ms": float(np.median(t_est)) / MS,
        "tax_measured_ms": float(np.median(t_meas)) / MS,
        "slowdown_ms": slowdown / MS,
        "predicted_ms": pred / MS,
        "err": _err(pred, off),
        "as_ran_err": _err(on, off),
        "tax_err": _err(float(np.median(t_est)), slowdown) if slowdown > 0 else None,
        "estimate_basis": basis,
        "measured_basis": meas.basis.as_dict() if meas.basis is not None else {},
    }


def _spread(xs: list[float | None]) -> str:
    v = [x for x in xs if x is not None]
    if not v:
        return "n/a"
    return (
        f"{statistics.median(v) * 100:+.0f}% ({min(v) * 100:+.0f} to {max(v) * 100:+.0f}%, "
        f"n={len(v)})"
    )


#: The within-run loop plants the sleep where its wait falls in the same step. DDP's fixture sleeps
#: in the optimizer, after the step's last collective: the peer waits for it at the *next* step's
#: first all-reduce, so with the straggler in alternate steps every step holds half a sleep (a
#: planted step: rank 0's sleep; a clean one: rank 1's wait for it), the planted and clean steps
#: measure alike (+4 % on a quiet host) and the clean steps are no reference. Before backward, the
#: peer waits in the same step's gradient all-reduces.
WITHIN_PHASE: dict[str, str] = {"ddp": "pre-backward"}
#: Four ranks of the naive fixture's batch (512) on a 2-core host are 4 processes computing on 2
#: cores: a step of about 210 ms of which the 40 ms sleep frees a core for the others, so the
#: planted steps ran no slower than the clean ones (-12 %, -32 to +8 %). A quarter of the batch
#: keeps the ranks' compute within the cores, as the 2-rank runs are.
WITHIN_ARGS: dict[str, tuple[str, ...]] = {"naive4": ("--batch-size", "128")}


def _within(
    cases: list[str], repeat: int, common: list[str], root: Path, json_out: Path | None
) -> None:
    print(f"closed loop within one run: {', '.join(cases)}; {repeat} repeat(s); traces in {root}")
    record: dict[str, Any] = {"mode": "within", "cases": {}}
    for case in cases:
        runs: list[dict[str, Any]] = []
        for rep in range(repeat):
            folder = root / f"within-{case}-{rep}"
            if case in STRAGGLERS:
                c = STRAGGLERS[case]
                args = [
                    *c.args,
                    *WITHIN_ARGS.get(case, ()),
                    "--world-size",
                    str(c.world),
                    *common,
                    *["--slow-rank", str(c.rank), "--slow-ms", str(c.ms)],
                    *["--slow-phase", WITHIN_PHASE.get(case, c.phase), "--slow-every", "2"],
                ]
            else:
                args = [*TAX[case], "--world-size", "2", *common, "--comm", "alternate"]
            load = _load1()
            t0 = time.perf_counter()
            _workload(folder, args, root / f"within-{case}-{rep}.log")
            fig = (
                within_straggler(folder, STRAGGLERS[case])
                if case in STRAGGLERS
                else within_tax(folder)
            )
            fig["load1"] = load
            runs.append(fig)
            print(f"  {folder.name}: {time.perf_counter() - t0:.1f} s, load {load:.1f}", flush=True)
        record["cases"][case] = runs
        _print_within(case, runs)
    if json_out:
        json_out.write_text(json.dumps(record, indent=1))
        print(f"figures: {json_out}")


def _print_within(case: str, runs: list[dict[str, Any]]) -> None:
    print(f"\n{case} (within one run; error: median (min to max) over repeats)")
    if case in TAX:
        for r in runs:
            print(
                f"  compute with comm {r['compute_on_ms']:.2f} ms, without {r['compute_off_ms']:.2f}"
                f" (slowdown {r['slowdown_ms']:+.2f}); tax estimated {r['tax_estimated_ms']:.2f}"
                f" ({r['estimate_basis'].get('kind')}), measured in-run {r['tax_measured_ms']:.2f}"
                f" ({r['measured_basis'].get('kind')})"
            )
        print(
            f"  compute predicted (with comm less tax) vs without: {_spread([r['err'] for r in runs])}"
        )
        print(
            f"  compute as it ran (with comm) vs without:          {_spread([r['as_ran_err'] for r in runs])}"
        )
        print(
            f"  tax vs slowdown:                                   {_spread([r['tax_err'] for r in runs])}"
        )
        return
    print(
        "  clean steps "
        + ", ".join(f"{r['clean_ms']:.1f}" for r in runs)
        + " ms; planted "
        + ", ".join(f"{r['planted_ms']:.1f}" for r in runs)
        + f" (as they ran: {_spread([r['planted_err'] for r in runs])})"
    )
    for key in runs[0]["scenarios"]:
        errs = [r["scenarios"][key]["err"] for r in runs]
        pair = [r["scenarios"][key].get("paired_err") for r in runs]
        cl = [r["scenarios"][key]["clean_replayed_err"] for r in runs]
        print(
            f"  {runs[0]['scenarios'][key]['name']:<14} planted steps predicted vs clean: "
            f"{_spread(errs)}; vs their neighbours: {_spread(pair)}; clean steps replayed "
            f"with it: {_spread(cl)}"
        )


if __name__ == "__main__":
    main()
