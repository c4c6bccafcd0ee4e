"""Run HTA (PyPI ``traceinsight``, ``import hta``) on every scenario and map its answers to the
benchmark's fields: ``peers/hta_predictions.json``, which ``python -m benchmarks.diagnosis score``
scores beside traceoverlap.

    bash benchmarks/diagnosis/peers/setup.sh
    benchmarks/diagnosis/peers/.venv/bin/python benchmarks/diagnosis/peers/run_hta.py [--runs DIR]

What HTA is asked, per scenario (``TraceAnalysis(trace_files={rank: path})``):

- ``get_potential_stragglers(num_candidates=2)``: its straggler analysis (the ranks whose last
  long NCCL kernel starts latest). First candidate = ``straggler``, both = ``straggler_top2``,
  and either a culprit on a healthy run. It is also HTA's only rank answer, so it is **not** read
  as the root rank (HTA has no notion of a root behind the late rank).
- ``get_comm_comp_overlap()``: communication-computation overlap per rank, recorded in the
  predictions (``overlap_pct``) but mapped to no field: a percentage says neither a cause, a
  verdict, a purpose nor advice.

Every other field (moving, root rank / op, cause, verdict, purpose, advice, hang) is not said:
HTA has no such answer. An analysis that raises (HTA reads communication from GPU kernels named
``ncclKernel*`` on a CUDA stream: on gloo CPU traces it finds none) is "not said", its error kept.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import math
import sys
import time
import warnings
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the repository root: benchmarks.diagnosis.score

from benchmarks.diagnosis.score import RUNS, Scenario, load_scenarios  # noqa: E402


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:300]


def predict(s: Scenario) -> dict[str, object]:
    """HTA's prediction for one scenario (the keys of score.predict_from_report it has)."""
    from hta.trace_analysis import TraceAnalysis

    pred: dict[str, object] = {}
    errors: dict[str, str] = {}
    if not s.traces:
        return {"error": "no traces (Flight Recorder dumps only): HTA reads traces"}
    files = {int(p.name[4:].split(".")[0]): str(p) for p in s.traces}
    quiet = io.StringIO()
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            ta = TraceAnalysis(trace_files=files, trace_dir=str(s.path))
    except Exception as e:  # noqa: BLE001  (a peer's failure is its answer: not said)
        return {"error": f"load: {_err(e)}"}
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            cand = [int(r) for r in ta.get_potential_stragglers(num_candidates=2)]
        pred["straggler"] = cand[0] if cand else None
        pred["straggler_top2"] = cand[:2]
        pred["culprit"] = bool(cand)
    except Exception as e:  # noqa: BLE001
        errors["straggler"] = _err(e)
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            ov = ta.get_comm_comp_overlap(visualize=False)
        pct = {
            str(int(r)): (None if v is None or math.isnan(float(v)) else round(float(v), 2))
            for r, v in zip(ov["rank"], ov["comp_comm_overlap_pctg"], strict=True)
        }
        pred["overlap_pct"] = pct
    except Exception as e:  # noqa: BLE001
        errors["overlap"] = _err(e)
    if errors:
        pred["errors"] = errors
    return pred


def _shown(p: Path) -> str:
    """``p`` relative to the repository root when inside it (no machine's paths in the file)."""
    try:
        return str(p.resolve().relative_to(HERE.parents[2]))
    except ValueError:
        return p.name


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="run_hta.py")
    ap.add_argument("--runs", type=Path, default=RUNS)
    ap.add_argument("--only", nargs="+", metavar="NAME")
    ap.add_argument("-o", "--out", type=Path, default=HERE / "hta_predictions.json")
    a = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    scenarios = load_scenarios(a.runs, a.only)
    preds = {}
    t0 = time.monotonic()
    for i, s in enumerate(scenarios):
        print(f"[{i + 1}/{len(scenarios)}] {s.name}", file=sys.stderr, flush=True)
        preds[s.name] = predict(s)
    said = sum("straggler" in p for p in preds.values())
    out = {
        "tool": "HTA",
        "version": f"traceinsight {version('traceinsight')}",
        "note": (
            f"HTA (traceinsight {version('traceinsight')}, pandas {version('pandas')}): "
            f"straggler analysis answered on {said} of {len(preds)} scenarios; its "
            "comm-computation overlap maps to no field; every other field is not said"
        ),
        "runs": _shown(a.runs),
        "seconds": round(time.monotonic() - t0, 1),
        "predictions": preds,
    }
    a.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(out["note"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
