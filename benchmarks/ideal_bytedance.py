"""Benchmark: the ``ideal`` scenario against the published straggler study (docs/whatif.md §3).

ByteDance's "Understanding Stragglers in Large Model Training Using What-if Analysis" (OSDI
2025) publishes its simulator and three jobs (StragglerAnalysis, Apache-2.0: ``data/trace-
{AR,SE,ST}.parquet``, the expected results in ``data/result-*.json``). Its straggler slowdown S
is the mean step of the run without launch delays over the mean step of the ideal run (every
compute op at the mean duration of its op type over all ranks and steps, every communication op
at its median, launch delays zero). This script puts each job into a :class:`RunGraph` and runs
traceoverlap's own transforms (:func:`traceoverlap.whatif.transforms.bare` and
:func:`~traceoverlap.whatif.transforms.ideal`) and replay on it, then compares S and the
per-step times with the published ones.

The mapping (a job is not a Kineto trace: its rows are ops per worker, step and type):

- one unit per worker (``rank``: a data-parallel rank on a pipeline stage); one node per op
  row, on a lane of its own (the study's ops are ordered by their dependencies only); times are
  the rows' ``start_ts`` / ``start_ts + duration`` on the job's clock (seconds -> ns);
- a node's type (its ``name``) is the row's ``optype``; communication optypes are ``Kind.COMM``;
- edges: the study's dependency model (``dep_on``: an op starts after the ops it depends on end,
  within one worker's step), as built by its ``parse_trace``;
- collectives: its communication groups (``comm_groups``), one instance per (group, step, and
  data-parallel rank unless the group syncs across data-parallel ranks, ``need_dp_sync``): a
  member ends the group's transfer after the last member starts, as traceoverlap's collectives;
- a step's time is the job's: the span from its first start to its last end over all workers.

The dependency model comes from the study's own code, which this repository does not carry:
the script runs it in a subprocess from a checkout given with ``--repo`` (``git clone`` the
StragglerAnalysis repository), with its requirements (pandas < 3, pyarrow, pyyaml, tqdm, ujson)
importable from ``--their-path`` (``pip install --target DIR "pandas<3" pyarrow pyyaml tqdm
ujson``). Not a test: a check against published numbers, run by hand::

    python benchmarks/ideal_bytedance.py --repo ../StragglerAnalysis --their-path /tmp/deps

Prints, per job: the identity replay's step error, S (published, ours), and the per-step mean
absolute difference of the no-delay and ideal step times against the published ones.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

JOBS = ("AR", "SE", "ST")

# --- phase 1: the study's dependency model, in its own environment (pandas < 3) ---------------

_EXPORT = r"""
import sys, numpy as np, yaml
from analyzer.wia import parse_trace
from analyzer.metatypes import JobMeta, OpType

meta_path, trace_path, out = sys.argv[1:4]
meta = JobMeta(**yaml.safe_load(open(meta_path)))
dep_on, comm_groups, op2gid, need_dp_sync, df = parse_trace(meta, trace_path)
df = df.reset_index(drop=True)
starts = df.attrs["step_start"]
step_start = df["step"].map(starts).to_numpy(dtype=np.float64)
start = df["start_ts"].to_numpy(dtype=np.float64) + step_start
end = df["end_ts"].to_numpy(dtype=np.float64) + step_start
ops = df["op"].astype(str).to_numpy()
key = list(zip(df["dp_rank"].tolist(), df["step"].tolist()))
row_of = {(o, d, s): i for i, (o, (d, s)) in enumerate(zip(ops, key))}
src, dst = [], []
for i, (o, (d, s)) in enumerate(zip(ops, key)):
    for u in dep_on.get(o, []):
        j = row_of.get((u, d, s))
        if j is not None:
            src.append(j)
            dst.append(i)
gid = np.array([op2gid.get(o, -1) for o in ops], dtype=np.int64)
dp_sync = np.array([o in need_dp_sync for o in ops], dtype=bool)
np.savez(
    out,
    dp=df["dp_rank"].to_numpy(np.int64), stage=df["stage"].to_numpy(np.int64),
    rank=df["rank"].to_numpy(np.int64), step=df["step"].to_numpy(np.int64),
    optype=df["optype"].astype(str).to_numpy().astype("U"), start=start, end=end,
    is_comm=df["is_comm"].to_numpy(bool), gid=gid, dp_sync=dp_sync,
    src=np.array(src, np.int64), dst=np.array(dst, np.int64),
)
"""


def export(repo: Path, their_path: str, job: str, out: Path) -> None:
    """Run the study's ``parse_trace`` on ``job`` in a subprocess; its model to ``out`` (npz)."""
    data = repo / "data"
    path = os.pathsep.join([their_path, str(repo), str(repo / "analyzer")])
    env = {**os.environ, "PYTHONPATH": path}
    subprocess.run(
        [sys.executable, "-c", _EXPORT, str(data / f"meta-{job}.yaml"),
         str(data / f"trace-{job}.parquet"), str(out)],
        check=True, env=env, timeout=1800,
    )  # fmt: skip


# --- phase 2: the job as a run graph, replayed with traceoverlap's transforms -----------------


def run_graph(m: dict[str, np.ndarray]):  # type: ignore[no-untyped-def]
    """The job's run graph (the mapping in the module docstring)."""
    from traceoverlap.core.model import Kind
    from traceoverlap.whatif.graph import RunGraph, _positions

    n = m["start"].size
    t0 = float(m["start"].min())
    start = np.round((m["start"] - t0) * 1e9).astype(np.int64)
    end = np.maximum(np.round((m["end"] - t0) * 1e9).astype(np.int64), start)
    ranks, unit = np.unique(m["rank"], return_inverse=True)
    steps, window = np.unique(m["step"], return_inverse=True)
    names, name = np.unique(m["optype"], return_inverse=True)
    comm = m["is_comm"] & (m["gid"] >= 0)
    # one instance per (group, step, data-parallel rank unless the group syncs across them)
    dp_key = np.where(m["dp_sync"], -1, m["dp"])
    key = np.stack([m["gid"], window, dp_key])
    _, inst = np.unique(key, axis=1, return_inverse=True)
    inst = np.where(comm, inst.ravel(), -1).astype(np.int64)
    nu, ns = ranks.size, steps.size
    wstart = np.full((nu, ns), np.iinfo(np.int64).max, dtype=np.int64)
    wend = np.full((nu, ns), -1, dtype=np.int64)
    np.minimum.at(wstart, (unit, window), start)
    np.maximum.at(wend, (unit, window), end)
    lane = np.arange(n, dtype=np.int64)
    z = np.zeros(0, np.int64)
    unit64, window64, name64 = unit.astype(np.int64), window.astype(np.int64), name.astype(np.int64)
    return RunGraph(
        unit=unit64,
        lane=lane,
        start_ns=start,
        end_ns=end,
        kind=np.where(m["is_comm"], Kind.COMM, Kind.COMPUTE).astype(np.int8),
        window=window64,
        name=name64,
        pos=_positions(unit64, window64, np.zeros(n, np.int64), name64),
        inst=inst,
        family=np.where(comm, 0, -1).astype(np.int64),
        lane_host=np.zeros(n, dtype=bool),
        lane_comm=m["is_comm"].astype(bool),
        src=m["src"].astype(np.int64),
        dst=m["dst"].astype(np.int64),
        src_start=np.zeros(m["src"].size, dtype=bool),
        gap=np.zeros(m["src"].size, dtype=np.int64),
        esrc=z,
        edst=z,
        egap=z,
        names=tuple(str(s) for s in names),
        families=("comm",),
        step_labels=tuple(str(s) for s in steps),
        unit_rank=ranks.astype(np.int64),
        win_start_ns=wstart,
        win_end_ns=wend,
        notes=(),
    )


def spans_s(g, start: np.ndarray, end: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Per step: its first start to its last end over every worker (seconds), as the study."""
    ns = len(g.step_labels)
    lo = np.full(ns, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(ns, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, g.window, start)
    np.maximum.at(hi, g.window, end)
    return (hi - lo).astype(np.float64) / 1e9


def compare(job: str, npz: Path, result: dict[str, object]) -> dict[str, float]:
    from traceoverlap.whatif.replay import observed_params, replay
    from traceoverlap.whatif.transforms import bare, ideal

    m = dict(np.load(npz, allow_pickle=False))
    g = run_graph(m)
    p = observed_params(g)
    obs = spans_s(g, g.start_ns, g.end_ns)
    ident = replay(g, p)
    rep = spans_s(g, ident.start_ns, ident.end_ns)
    b = replay(g, bare(g, p))
    i = replay(g, ideal(g, p))
    nodelay, noblk = spans_s(g, b.start_ns, b.end_ns), spans_s(g, i.start_ns, i.end_ns)
    labels = list(g.step_labels)
    pub_nodelay = np.array([result["step_t_nodelay"][s] for s in labels])  # type: ignore[index]
    pub_noblk = np.array([result["step_t_noblk"][s] for s in labels])  # type: ignore[index]
    s_ours = float(nodelay.mean() / noblk.mean())
    s_pub = float(result["blocking_slowdown"])  # type: ignore[arg-type]
    # the attribution: the ideal with one group at its observed durations, over the ideal (the
    # study replaces only compute durations there: communication keeps its ideal transfers, so
    # only the compute op types are compared)
    attribution: dict[str, float] = {}
    groups = {
        "by_dp_rank": ("blocking_decompose_by_dp_rank", m["dp"]),
        "by_stage": ("blocking_decompose_by_stage", m["stage"]),
    }
    for label, (field, col) in groups.items():
        pub = result.get(field) or {}  # type: ignore[attr-defined]
        errs = []
        for k, v in pub.items():
            keep = (col == int(k)) & ~m["is_comm"]
            sk = replay(g, ideal(g, p, keep))
            mine = float(spans_s(g, sk.start_ns, sk.end_ns).mean() / noblk.mean())
            errs.append(abs(mine - float(v)) / float(v))
        if errs:
            attribution[f"{label}_max_error_ratio"] = float(max(errs))
    pub_t = result.get("blocking_decompose_by_optype") or {}  # type: ignore[attr-defined]
    errs = []
    for t, v in pub_t.items():
        keep = (m["optype"] == t) & ~m["is_comm"]
        if not keep.any():
            continue
        sk = replay(g, ideal(g, p, keep))
        mine = float(spans_s(g, sk.start_ns, sk.end_ns).mean() / noblk.mean())
        errs.append(abs(mine - float(v)) / float(v))
    if errs:
        attribution["by_optype_compute_max_error_ratio"] = float(max(errs))
    return {
        **attribution,
        "identity_max_error_ratio": float(np.max(np.abs(rep - obs) / obs)),
        "S_published": s_pub,
        "S_ours": s_ours,
        "S_error_ratio": abs(s_ours - s_pub) / s_pub,
        "nodelay_mean_abs_error_ratio": float(np.mean(np.abs(nodelay - pub_nodelay) / pub_nodelay)),
        "ideal_mean_abs_error_ratio": float(np.mean(np.abs(noblk - pub_noblk) / pub_noblk)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, required=True, help="a StragglerAnalysis checkout")
    ap.add_argument(
        "--their-path", default="", help="where its requirements are (pandas < 3, pyarrow...)"
    )
    ap.add_argument("--jobs", nargs="*", default=list(JOBS))
    a = ap.parse_args()
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for job in a.jobs:
            npz = Path(tmp) / f"{job}.npz"
            export(a.repo, a.their_path, job, npz)
            result = json.loads((a.repo / "data" / f"result-{job}.json").read_text())
            out[job] = compare(job, npz, result)
            r = out[job]
            print(
                f"{job}: S published {r['S_published']:.3f}, ours {r['S_ours']:.3f} "
                f"({100 * r['S_error_ratio']:.1f} % off); per step, mean |error|: no-delay "
                f"{100 * r['nodelay_mean_abs_error_ratio']:.1f} %, ideal "
                f"{100 * r['ideal_mean_abs_error_ratio']:.1f} %; identity replay max error "
                f"{100 * r['identity_max_error_ratio']:.2f} %; attribution max error "
                + ", ".join(f"{k[:-16]} {100 * v:.2f} %" for k, v in r.items() if "by_" in k),
                flush=True,
            )
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
