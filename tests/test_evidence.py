"""Evidence, not names; specific, significant and stable roots (docs/diagnosis.md §13, §14).

Hand-built runs derive their answers in the comments; the real gloo runs under
``fixtures/workloads/style_*`` were recorded with ``workloads/styles/*.py`` (another coding style
than ``workloads/``), each with its cause known by construction (fixtures/workloads/README.md).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from builders import gloo_rank, gpu_timeline
from click.testing import CliRunner
from conftest import REAL_TRACES

from traceoverlap import AnalyzeOptions, analyze
from traceoverlap.cli import main
from traceoverlap.core.errors import UsageError
from traceoverlap.core.model import Timeline, concat_timelines
from traceoverlap.core.options import Thresholds, load_config
from traceoverlap.core.vocab import Purpose
from traceoverlap.rank.hostranges import KERNEL_MARK
from traceoverlap.readers.kineto._columns import input_bytes
from traceoverlap.run.findings import advice

MS = 1_000_000
WORK = Path(__file__).resolve().parent.parent / "fixtures" / "workloads"
GLOO = (10, 11)


def _cpu_rank(
    rank: int, rows: list[tuple[str, str, int, int, int]], markers: list[tuple[int, int, int]]
) -> Timeline:
    """A gloo rank of a 2-rank world (builders.gloo_rank): rows (category, name, tid, start ms,
    end ms), tid 1 the main thread, 10/11 gloo workers; markers (step number, start ms, end ms)."""
    return gloo_rank(rank, rows, markers)


# --- §14 specific ---------------------------------------------------------------------------


def _expert_run() -> Timeline:
    """Rank 0: ``train_step`` [0,100) holds ``forward`` [0,20) holding ``expert`` [10,15); its
    all-reduce [20,65), then ``aten::mm`` [65,100). Rank 1 receives more tokens: ``forward``
    [0,60) holding ``expert`` [10,50); all-reduce [60,65), then ``aten::mm`` [65,100)."""
    r0 = [
        ("annotation", "train_step", 1, 0, 100),
        ("annotation", "forward", 1, 0, 20),
        ("annotation", "expert", 1, 10, 15),
        ("cpu_op", "aten::mm", 1, 0, 10),
        ("cpu_op", "aten::mm", 1, 15, 20),
        ("annotation", "gloo:all_reduce", 10, 20, 65),
        ("cpu_op", "aten::mm", 1, 65, 100),
    ]
    r1 = [
        ("annotation", "train_step", 1, 0, 100),
        ("annotation", "forward", 1, 0, 60),
        ("annotation", "expert", 1, 10, 50),
        ("cpu_op", "aten::mm", 1, 0, 10),
        ("cpu_op", "aten::mm", 1, 50, 60),
        ("annotation", "gloo:all_reduce", 10, 60, 65),
        ("cpu_op", "aten::mm", 1, 65, 100),
    ]
    return concat_timelines([_cpu_rank(0, r0, [(1, 0, 100)]), _cpu_rank(1, r1, [(1, 0, 100)])])


def test_root_is_the_child_that_explains_most_not_the_enclosing_range() -> None:
    """The all-reduce's first arrival is rank 0 at 20, rank 1 arrives at 60: lateness 40.
    Rank 1 since its step began [0,60) against rank 0 over [0,20): ``train_step`` 60 - 20 = 40,
    ``forward`` 60 - 20 = 40, ``expert`` 40 - 5 = 35, ``aten::mm`` 20 - 15 = 5. At least half
    of 40 (20): train_step, forward, expert; train_step holds forward holds expert, expert holds
    none of them: the root is ``expert``, 35 of 40 ms = 87.5 % explained. (The rule before:
    the smallest range within 90 % of the largest excess, 36 ms: ``forward``.)"""
    a = analyze(_expert_run())
    b = a.collectives.blame.set_index("rank")
    assert b.loc[0, "root_rank"] == 1 and b.loc[0, "lateness_ns"] == 40 * MS
    assert b.loc[0, "cause"] == "expert" and b.loc[0, "cause_ns"] == 35 * MS
    assert b.loc[0, "explained_ratio"] == pytest.approx(35 / 40)


def _kernel_rank(rank: int, slow: int) -> Timeline:
    """GPU rank: kernels ``k_a`` [0,10), ``k_b`` [10,10+slow), ``k_a`` [10+slow,20+slow) on
    stream 7, then the NCCL all-reduce on stream 20 from 20+slow to 80; ProfilerStep#1 over
    [0,80) on the host."""
    kernels = [
        ("k_a", 7, 0, 10 * MS),
        ("k_b", 7, 10 * MS, (10 + slow) * MS),
        ("k_a", 7, (10 + slow) * MS, (20 + slow) * MS),
        ("ncclKernel_AllReduce_RING_LL_Sum_float", 20, (20 + slow) * MS, 80 * MS),
    ]
    t = gpu_timeline(kernels, [("ProfilerStep#1", 0, 80 * MS)], rank=rank)
    info = dataclasses.replace(
        t.traces[0], world_size=2, clock="unix", rank_source="distributedInfo", backend="nccl"
    )
    return Timeline(t.events, (info,))


def test_gpu_root_is_the_kernel_slower_than_the_same_kernel_on_the_peer() -> None:
    """Rank 0's ``k_b`` takes 10 ms, rank 1's 50: the all-reduce starts at 30 on rank 0 and at
    70 on rank 1 (lateness 40). Kernels by name and call order in the step: ``k_a`` call 1 and
    call 2 take 10 on both (excess 0), ``k_b`` call 1 takes 50 against 10: excess 40, all of the
    lateness, and no host range explains anything (the only one is the step marker)."""
    a = analyze(concat_timelines([_kernel_rank(0, 10), _kernel_rank(1, 50)]))
    b = a.collectives.blame.set_index("rank")
    assert b.loc[0, "root_rank"] == 1 and b.loc[0, "lateness_ns"] == 40 * MS
    assert b.loc[0, "cause"] == "k_b (call 1 in the step)"
    assert b.loc[0, "cause_ns"] == 40 * MS
    assert not str(b.loc[0, "cause"]).startswith(KERNEL_MARK)


# --- §14 significant and stable ---------------------------------------------------------------


def _small_wait_run() -> Timeline:
    """Both ranks' step [0,100). Rank 0: ``aten::mm`` [0,88), all-reduce [88,92), ``aten::mm``
    [92,100); rank 1: ``aten::mm`` [0,90), all-reduce [90,92), ``aten::mm`` [92,100)."""
    r0 = [
        ("cpu_op", "aten::mm", 1, 0, 88),
        ("annotation", "gloo:all_reduce", 10, 88, 92),
        ("cpu_op", "aten::mm", 1, 92, 100),
    ]
    r1 = [
        ("cpu_op", "aten::mm", 1, 0, 90),
        ("annotation", "gloo:all_reduce", 10, 90, 92),
        ("cpu_op", "aten::mm", 1, 92, 100),
    ]
    return concat_timelines([_cpu_rank(0, r0, [(1, 0, 100)]), _cpu_rank(1, r1, [(1, 0, 100)])])


def test_no_straggler_below_the_threshold() -> None:
    """Durations 4 and 2 ms: transfer 2, rank 0 waits 2 ms for rank 1, exposed (nothing computes
    on rank 0 in [88,90)). Step time 100 + 100 = 200 ms: waiting 2 / 200 = 1.0 % < 5 %: no
    straggler named; with the threshold at 0.5 % rank 1 is named (1.0 % of step time)."""
    a = analyze(_small_wait_run())
    v = a.collectives.verdict
    assert v is not None and v.rank is None and a.collectives.top_straggler is None
    assert v.wait_ratio == pytest.approx(0.01)
    assert v.text() == "no straggler: waiting is 1.0% of step time (below 5.0%)"
    wait = next(f for f in a.findings if f.kind == "wait")
    assert "no straggler: waiting is 1.0% of step time" in wait.title
    b = analyze(_small_wait_run(), AnalyzeOptions(thresholds=Thresholds(straggler_ratio=0.005)))
    assert b.collectives.top_straggler == 1
    assert b.collectives.verdict.text() == "straggler: rank 1 (waiting for it is 1.0% of step time)"


def test_straggler_threshold_option_config_and_cli(tmp_path: Path) -> None:
    cfg = tmp_path / "t.toml"
    cfg.write_text("[thresholds]\nstraggler_ratio = 0.005\n")
    assert load_config(cfg)["straggler_ratio"] == 0.005
    with pytest.raises(UsageError, match="straggler_ratio"):
        Thresholds(straggler_ratio=1.5)
    bad = tmp_path / "bad.toml"
    bad.write_text("[thresholds]\nstraggler_ratio = 2\n")
    with pytest.raises(UsageError, match="straggler_ratio must be a number between 0 and 1"):
        load_config(bad)
    res = CliRunner().invoke(main, ["analyze", "--help"])
    assert "--straggler-threshold" in res.output


def _late_run(late: list[tuple[int, int]]) -> Timeline:
    """Two ranks, one step of 100 ms per item of ``late`` (step s over [100(s-1), 100 s)), each
    item (late rank, its compute ms): the late rank computes ``aten::mm`` that long, the other
    20 ms; both all-reduce until 65 ms (offsets within the step) and compute [65,100)."""
    rows: dict[int, list[tuple[str, str, int, int, int]]] = {0: [], 1: []}
    for s, (late_rank, c_late) in enumerate(late, start=1):
        base = 100 * (s - 1)
        for r in (0, 1):
            c = c_late if r == late_rank else 20
            rows[r] += [
                ("cpu_op", "aten::mm", 1, base, base + c),
                ("annotation", "gloo:all_reduce", 10, base + c, base + 65),
                ("cpu_op", "aten::mm", 1, base + 65, base + 100),
            ]
    marks = [(s, 100 * (s - 1), 100 * s) for s in range(1, len(late) + 1)]
    return concat_timelines([_cpu_rank(r, rows[r], marks) for r in (0, 1)])


def _moving_run() -> Timeline:
    """Steps 1-4: in step s the late rank is s % 2 and computes 60 ms (:func:`_late_run`)."""
    return _late_run([(s % 2, 60) for s in range(1, 5)])


def test_moving_straggler_is_said_to_move() -> None:
    """Each step one rank waits 40 ms (exposed) for the other: 40 of 200 ms = 20 % >= 5 % in
    every step. The late rank is 1 in steps 1, 3 and 0 in steps 2, 4: neither leads 2/3 of the
    steps, so no rank is named: "the late rank moves: 1 in steps 1, 3; 0 in steps 2, 4"."""
    a = analyze(_moving_run())
    v = a.collectives.verdict
    assert v is not None and v.rank is None and a.collectives.top_straggler is None
    assert v.moving == ((1, ("1", "3")), (0, ("2", "4")))
    assert v.text() == "the late rank moves: 1 in steps 1, 3; 0 in steps 2, 4"


def test_a_dominant_late_rank_is_named_though_noise_leads_some_steps() -> None:
    """Two ranks, steps 1-4 of 100 ms, all-reduce ending at 65 ms in each step. Rank 0 is late by
    40 ms in steps 1, 2 (computes 60 ms against its peer's 20 ms); rank 1 by 15 ms in steps 3, 4
    (35 against 20). Waiting per step: 40 and 15 ms of 200 (20 % and 7.5 %, both >= 5 %: every
    step counts). Rank 0 leads 2 of 4 steps (half, not 2/3), but the waiting traced to it, 80 ms,
    is 2.7x rank 1's 30 ms (>= 2x, diagnosis.md §14's stability with one rank clearly late): it is
    named, not "the late rank moves"."""
    a = analyze(_late_run([(0, 60), (0, 60), (1, 35), (1, 35)]))
    v = a.collectives.verdict
    assert v is not None and v.rank == 0 and v.moving == ()
    assert a.collectives.top_straggler == 0


def test_the_stable_leader_is_named_not_the_largest_total() -> None:
    """Two ranks, steps 1-3 of 100 ms, all-reduce ending at 65 ms. Rank 1 is late by 10 ms in
    steps 1, 2 (computes 30 against 20); rank 0 by 40 ms in step 3 (60 against 20). Waiting per
    step: 10, 10, 40 ms of 200 (5 %, 5 %, 20 %: all count). Rank 1 leads 2 of 3 steps (2/3: stable)
    though rank 0 has more waiting in all (40 against 20 ms; rank 0 leads 1 step, not half: not
    dominant). §14 names the rank that passed the stability test: rank 1, 20 ms = 3.3 % of the
    600 ms of steps: below 5 %, so the default threshold names no rank; at 3 % rank 1."""
    tl = _late_run([(1, 30), (1, 30), (0, 60)])
    low = AnalyzeOptions(thresholds=Thresholds(straggler_ratio=0.03))
    a = analyze(tl, low)
    v = a.collectives.verdict
    assert v is not None and v.rank == 1 and v.moving == ()
    assert a.collectives.top_straggler == 1


# --- §13 evidence -----------------------------------------------------------------------------


def _tail_timeline(fmt: str, marker: str) -> Timeline:
    """test_diagnosis's tail case: ten 5 ms kernels [0,50), an NCCL all-reduce [40,56)."""
    kernels = [(f"k{i}", 7, 5 * i, 5 * i + 5) for i in range(10)]
    kernels.append(("ncclKernel_AllReduce_RING_LL_Sum_float", 20, 40, 56))
    t = gpu_timeline(kernels, [(marker, 0, 1)])
    info = dataclasses.replace(t.traces[0], format=fmt, pytorch_capture=fmt == "kineto")
    return Timeline(t.events, (info,))


def test_no_pytorch_advice_without_pytorch() -> None:
    """The same tail (6 ns exposed after the last kernel): from a Kineto trace (the PyTorch
    profiler's) the AllReduce tail advice (DDP buckets); from an Nsight Systems trace with no
    PyTorch name in it (an MPI / CUDA program, its NVTX step ``iteration 1``) the program-level
    advice, no DDP, no bucket."""
    torch = analyze(_tail_timeline("kineto", "ProfilerStep#1"))
    assert "bucket" in next(f for f in torch.findings if f.kind == "tail").advice
    mpi = analyze(_tail_timeline("nsys", "iteration 1"), AnalyzeOptions(step_regex="^iteration"))
    plain = next(f for f in mpi.findings if f.kind == "tail")
    assert plain.advice == advice("tail", "AllReduce", pytorch=False)
    for word in ("DDP", "bucket", "FSDP", "torch.compile"):
        assert word not in plain.advice


def test_allgather_advice_needs_fsdp_evidence() -> None:
    """An all-gather of unknown purpose gets no FSDP prefetch advice; an FSDP one does, unless
    prefetch is already on."""
    unknown = advice("dependency", "AllGather/ReduceScatter", Purpose.UNKNOWN)
    assert "FSDP" not in unknown and "prefetch" not in unknown
    fsdp = advice("dependency", "AllGather/ReduceScatter", Purpose.FSDP_ALLGATHER)
    assert "enable forward/backward prefetch" in fsdp
    on = advice("dependency", "AllGather/ReduceScatter", Purpose.FSDP_ALLGATHER, prefetch=True)
    assert "enable" not in on and "prefetch is on" in on


# --- real gloo runs (workloads/styles) --------------------------------------------------------


def test_style_moving_straggler() -> None:
    """In step i rank i % 2 sleeps 25 ms before its forward: rank 0 is late in steps 2 and 4,
    rank 1 in steps 3 and 5 (ProfilerStep#2..5)."""
    v = analyze(WORK / "style_moving_straggler").collectives.verdict
    assert v is not None and v.rank is None
    assert dict(v.moving) == {0: ("2", "4"), 1: ("3", "5")}


def test_style_healthy_has_no_straggler() -> None:
    """Same work on both ranks, no sleep: the waiting is noise, below 5 % of step time."""
    a = analyze(WORK / "style_healthy")
    v = a.collectives.verdict
    assert v is not None and v.rank is None and v.text().startswith("no straggler: waiting is")
    assert a.collectives.top_straggler is None


def test_style_shampoo_allgather_is_the_optimizers() -> None:
    """The all-gather runs inside ``Optimizer.step#BlockShampoo.step``, no FSDP anywhere."""
    a = analyze(WORK / "style_shampoo_allgather")
    inst = a.collectives.instances
    ag = inst[inst["family"] == "AllGather/ReduceScatter"]
    assert len(ag) and set(ag["purpose"]) == {Purpose.OPTIMIZER_COLLECTIVE}
    for f in a.findings:
        assert "FSDP" not in f.advice and "prefetch" not in f.advice


def test_style_side_thread_is_no_gradient_sync() -> None:
    """The metrics thread's all-reduces (inside the main thread's forward / backward) have an
    unknown purpose; the main thread's one after backward is the gradient all-reduce."""
    a = analyze(WORK / "style_side_thread")
    pr = a.collectives.per_rank
    got = pd.Series(pr["purpose"].astype(str)).value_counts()
    assert got.get(Purpose.UNKNOWN, 0) > 0 and got.get(Purpose.GRADIENT_ALLREDUCE, 0) > 0
    for f in a.findings:
        if f.purpose == Purpose.UNKNOWN:
            assert "DDP" not in f.advice or f.kind == "transfer-bound"


def test_style_fsdp_prefetch_is_not_told_to_enable_prefetch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """workloads/styles/fsdp_prefetch.py issues each next layer's all-gather before computing
    the current layer: read as prefetching, no "enable forward/backward prefetch"; the FSDP
    fixture, which gathers each layer right before using it (blocking), is read as not
    prefetching. (Its findings no longer carry the dependency advice: with the time blocked in
    its autograd functions counted as communication (§11) every step is communication-bound, so
    the transfer-bound finding speaks for it.)"""
    import traceoverlap.run.analysis as run_analysis

    seen: list[bool] = []
    real = run_analysis.findings

    def spy(*args: Any, **kw: Any) -> Any:
        seen.append(kw["context"].prefetch)
        return real(*args, **kw)

    monkeypatch.setattr(run_analysis, "findings", spy)
    a = analyze(WORK / "style_fsdp_prefetch")
    assert not any("enable forward/backward prefetch" in f.advice for f in a.findings)
    inst = a.collectives.instances
    assert (inst["purpose"] == Purpose.FSDP_ALLGATHER).sum() > 0
    analyze(WORK / "fsdp")
    assert seen == [True, False]


def test_moe_and_pipeline_roots_are_the_sleep() -> None:
    """moe_slow (rank 2 sleeps in forward) and pipeline_slow_last (stage 1 sleeps in each
    micro-batch's forward): the root named for the most waiting is ``straggler_sleep``, not the
    ``forward`` / ``microbatch#k`` around it."""
    for name in ("moe_slow", "pipeline_slow_last"):
        b = analyze(WORK / name).collectives.blame
        by = b.groupby("cause")["exposed_wait_ns"].sum().sort_values(ascending=False)
        assert by.index[0] == "straggler_sleep", name


@pytest.mark.skipif(not (REAL_TRACES / "kineto" / "dlrm_v100_8rank").is_dir(), reason="no DLRM")
def test_dlrm_gpu_ranks_compare_kernels() -> None:
    """The 8-rank DLRM GPU run: every rank's blame ranges hold its kernels by call order, and
    every blame row names a cause or says why not (never a kernel name with the internal mark)."""
    a = analyze(REAL_TRACES / "kineto" / "dlrm_v100_8rank")
    b = a.collectives.blame
    assert len(b)
    causes = [c for c in b["cause"].dropna().astype(str)]
    assert all(not c.startswith(KERNEL_MARK) for c in causes)


# --- §13 bytes from Input Dims ----------------------------------------------------------------


def test_input_bytes_from_dims_and_types() -> None:
    """``Input Dims`` x ``Input type``: a 128 x 128 float tensor is 65,536 bytes; two bf16
    tensors of 10 and 6 elements 32; a tensor list (no element type) or an unknown type is
    unknown; scalars and empty arguments are skipped."""
    assert input_bytes(b"[[128, 128]]", b'["float"]') == 128 * 128 * 4
    assert input_bytes(b"[[10], [2, 3]]", b'["c10::BFloat16", "c10::BFloat16"]') == 16 * 2
    assert input_bytes(b"[[18], [], []]", b'["double", "", "Scalar"]') == 18 * 8
    assert input_bytes(b"[[[128, 128]], []]", b'["TensorList", ""]') == -1
    assert input_bytes(b"[[4]]", b'["mystery"]') == -1
    assert input_bytes(b"[[4]]", b"not json") == -1


def test_gloo_all_reduce_bytes_from_input_dims() -> None:
    """style_shampoo_allgather all-reduces each parameter of Linear(128,128) and
    Linear(128,16) (gloo on CPU: no record_param_comms, sizes only in ``Input Dims``): weights
    128 x 128 x 4 = 65,536 and 16 x 128 x 4 = 8,192 bytes, biases 128 x 4 = 512 and 16 x 4 = 64.
    The all-gather's input is one rank's shard: left unknown."""
    inst = analyze(WORK / "style_shampoo_allgather").collectives.instances
    ar = inst[inst["family"] == "AllReduce"]
    assert set(ar["bytes"].astype(int)) == {65536, 512, 8192, 64}
    ag = inst[inst["family"] == "AllGather/ReduceScatter"]
    assert ag["bytes"].isna().all()


def test_style_moe_uneven_root_is_the_expert_range() -> None:
    """Rank 1's expert gets 3x the tokens: in every step rank 0 waits for rank 1, and the root
    named is ``expert`` (the range that grew), not ``forward`` around it (it holds ``expert``)
    nor the ``aten::*`` ops inside it (ops say what, the range says where)."""
    b = analyze(WORK / "style_moe_uneven").collectives.blame
    assert len(b) and set(b["root_rank"]) == {1}
    assert set(b["cause"]) == {"expert"}
    assert (b["explained_ratio"] >= 0.5).all()
