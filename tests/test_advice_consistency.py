"""diagnosis.md §9-10 on every real trace and recorded run: the findings name what the
collectives are for (or say it is unknown), and no advice contradicts the numbers printed above
it (bandwidth advice only with bandwidth evidence, CPU advice on CPU runs, no bucketing advice
to a bucketed run, expert advice only for MoE, training advice never for an inference forward).
"""

from __future__ import annotations

import pytest
from conftest import WORKLOAD_FIXTURES, real_trace

from traceoverlap import analyze
from traceoverlap.core.vocab import PURPOSES
from traceoverlap.run.bandwidth import family_bandwidth
from traceoverlap.run.results import Analysis

REAL = [
    "kineto/a100_nccl_allreduce_rank0.json.gz",
    "kineto/amd_mi300x_ddp8_resnet_actckpt_rccl_rank0.json.gz",
    "kineto/dlrm_v100_8rank",
    "nsys/fsdp_2gpu_h100.sqlite",
]
RUNS = sorted(p.name for p in WORKLOAD_FIXTURES.iterdir() if p.is_dir())

BYTES_ADVICE = ("fewer bytes (", "faster interconnect", "powersgd", "bf16/fp16", "low-precision")
BUCKETING_ADVICE = ("in buckets (or use ddp)", "(bucketed / ddp)", "a bucket at a time")
CUDA_ADVICE = ("cuda graphs", "pin_memory", "torch.compile")
# communication findings whose purpose this module owns (wait / straggler findings name ranks)
PURPOSED = ("tail", "dependency", "host", "transfer-bound")


def check(a: Analysis) -> None:
    cpu = all(t.device is None for t in a.traces)
    bw = family_bandwidth(a.collectives.instances) if a.collectives is not None else {}
    for f in a.findings:
        text = f.advice.lower()
        if f.kind in PURPOSED:
            assert f.purpose in PURPOSES, f
            words = "purpose unknown" if f.purpose == "unknown" else PURPOSES[f.purpose]
            assert words in f.title, f.title
        if any(k in text for k in BYTES_ADVICE):
            # "before moving fewer bytes" is how the no-evidence advice says to check first
            assert f.family is not None and bw.get(f.family) is not None, f
            assert bw[f.family].verdict == "bandwidth", (f.title, f.advice)
        if cpu:
            assert not any(k in text for k in CUDA_ADVICE), f.advice
        if f.purpose in ("ddp-gradient-allreduce",) or (
            f.purpose == "gradient-allreduce" and _bucketed(a)
        ):
            assert not any(k in text for k in BUCKETING_ADVICE), f.advice
        if f.purpose is not None and not f.purpose.startswith("moe"):
            assert "capacity factor" not in text and "experts" not in text, f
        if f.purpose == "tp-allreduce":
            assert "gradient" not in text and "backward" not in text, f
        if f.kind == "transfer-bound":
            ev = f.evidence
            assert ev["comm_ns"] > ev["compute_ns"], f  # "more communication than compute"
        if f.share_ratio is not None:
            assert 0 <= f.share_ratio <= 1, f


#: recorded runs that launch their all-reduces during backward (fixtures/workloads/README.md)
BUCKETED_RUNS = {"overlap", "bucketed", "ddp", "bucketed_slow", "slow_rank", "host_delay"}


def _bucketed(a: Analysis) -> bool:
    return any(t.path.split("/")[-2] in BUCKETED_RUNS for t in a.traces if t.path)


@pytest.mark.parametrize("rel", REAL)
def test_real_traces_name_purpose_and_advice_agrees(rel: str) -> None:
    a = analyze(real_trace(rel))
    check(a)
    # every real trace here has communication findings, and every one names what it is for
    assert any(f.kind in PURPOSED for f in a.findings)


@pytest.mark.parametrize("run", RUNS)
def test_recorded_runs_name_purpose_and_advice_agrees(run: str) -> None:
    check(analyze(WORKLOAD_FIXTURES / run))


def test_purposes_of_real_traces() -> None:
    # what the launching host ranges tell (see the test names for the evidence in each trace):
    # DDP on the A100 (DistributedDataParallel.forward, all-reduces inside backward), TorchRec's
    # embedding all-to-alls (sparse_data_dist, All2All_Pooled) and DDP's all-reduces in DLRM,
    # Ulysses all-to-alls (AllToAll4D) in the nsys capture
    want = {
        "kineto/a100_nccl_allreduce_rank0.json.gz": {"ddp-gradient-allreduce", "ddp-broadcast"},
        "kineto/dlrm_v100_8rank": {"embedding-alltoall", "ddp-gradient-allreduce"},
        "nsys/fsdp_2gpu_h100.sqlite": {"sequence-parallel-alltoall"},
    }
    for rel, purposes in want.items():
        got = set(analyze(real_trace(rel)).collectives.instances["purpose"])
        assert purposes <= got, (rel, got)


def test_gloo_reduce_scatter_and_all_to_all_run() -> None:
    # fixtures/gloo_collectives (README there): a real gloo run. The reduce-scatter runs as a
    # gloo all-reduce under c10d::_reduce_scatter_base_: its purpose says so; the all-to-all has
    # no range telling what it is for: unknown, and no MoE advice for it.
    a = analyze(WORKLOAD_FIXTURES.parent / "gloo_collectives")
    check(a)
    inst = a.collectives.instances
    purpose = dict(zip(inst["family"], inst["purpose"], strict=False))
    assert purpose == {"AllReduce": "reducescatter-as-allreduce", "AllToAll": "unknown"}
    for f in a.findings:
        assert "expert" not in f.advice.lower() and "cuda" not in f.advice.lower()
    assert any(f.purpose == "reducescatter-as-allreduce" for f in a.findings)
