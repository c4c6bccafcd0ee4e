"""diagnosis.md §10: the purpose of a collective from the host ranges around its launch, on
hand-built GPU timelines (all launches at t=5 unless said; ranges are host annotations)."""

from __future__ import annotations

from builders import gpu_timeline

from traceoverlap import AnalyzeOptions, analyze

AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
SR = "ncclDevKernel_SendRecv"


def _purposes(kernels, ranges, launch_at, **kw):
    tl = gpu_timeline(kernels, [("ProfilerStep#1", 0, 200), *ranges], launch_at=launch_at)
    res = analyze(tl, AnalyzeOptions(**kw))
    return res, sorted(set(res.collectives.instances["purpose"]))


def test_allreduce_in_an_inference_forward_is_tensor_parallel():
    # no backward range anywhere: an all-reduce launched inside "## forward ##" is the
    # tensor-parallel all-reduce of an inference forward. Compute b [60, 110) (launched at 5)
    # starts after it: its 40 exposed ns are dependency (compute 60 >= comm 40: not
    # communication-bound); the advice is TP advice, never gradient / backward advice.
    res, p = _purposes(
        [("a", 7, 10, 20), (AR, 20, 20, 60), ("b", 7, 60, 110)],
        [("## forward ##", 0, 100)],
        [5, 5, 5],
    )
    assert p == ["tp-allreduce"]
    f = next(f for f in res.findings if f.kind == "dependency")
    assert f.purpose == "tp-allreduce" and "tensor-parallel" in f.title
    assert "gradient" not in f.advice and "backward" not in f.advice


def test_allreduce_in_backward_without_ddp_is_the_loops_gradient_allreduce():
    # a backward range [50, 150) holds the all-reduce's launch (at 60); no DDP range: the
    # training loop's own gradient all-reduce
    _, p = _purposes(
        [("a", 7, 10, 20), (AR, 20, 70, 90), ("b", 7, 95, 99)],
        [("## forward ##", 0, 50), ("## backward ##", 50, 150)],
        [5, 60, 61],
    )
    assert p == ["gradient-allreduce"]


def test_ddp_run_backward_allreduce_is_ddp_buckets():
    # the same with a DistributedDataParallel.forward range in the run: DDP's reducer buckets
    _, p = _purposes(
        [("a", 7, 10, 20), (AR, 20, 70, 90), ("b", 7, 95, 99)],
        [("DistributedDataParallel.forward", 0, 50), ("## backward ##", 50, 150)],
        [5, 60, 61],
    )
    assert p == ["ddp-gradient-allreduce"]


def test_sendrecv_is_pipeline_only_under_pipeline_ranges():
    # a send/recv launched under "PipelineStage.send" is pipeline p2p; the same kernel with no
    # range around it says unknown (not guessed)
    _, p = _purposes([(SR, 20, 10, 30)], [("PipelineStage.send", 0, 50)], [5])
    assert p == ["pipeline-p2p"]
    _, p = _purposes([(SR, 20, 10, 30)], [], [5])
    assert p == ["unknown"]


def test_deepep_dispatch_is_moe_dispatch():
    # DeepEP's dispatch kernel (counted as communication with a pattern): MoE token dispatch
    _, p = _purposes(
        [("deep_ep::intranode::dispatch", 27, 10, 30)], [], [5], comm_patterns=["deep_ep"]
    )
    assert p == ["moe-dispatch"]


def test_fsdp_all_gather_and_reduce_scatter():
    # FSDP's ranges around the launches: an all-gather under FSDP::pre_forward, a reduce-scatter
    # under FSDP::post_backward_reduce
    _, p = _purposes(
        [("ncclDevKernel_AllGather_RING_LL", 20, 10, 30)], [("FSDP::pre_forward", 0, 50)], [5]
    )
    assert p == ["fsdp-allgather"]
    _, p = _purposes(
        [("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", 20, 10, 30)],
        [("FSDP::post_backward_reduce", 0, 50)],
        [5],
    )
    assert p == ["fsdp-reducescatter"]


def test_torchrec_embedding_all_to_all():
    # TorchRec's sparse data distribution range around an all-to-all: embedding all-to-all (not
    # MoE: no expert advice)
    _, p = _purposes(
        [("ncclDevKernel_AllToAll_RING", 20, 10, 30)], [("## sparse_data_dist ##", 0, 50)], [5]
    )
    assert p == ["embedding-alltoall"]


def test_training_tp_allreduce_in_backward_is_tensor_parallel():
    # A training run (a backward range exists): an all-reduce launched inside a Megatron-style
    # tensor-parallel autograd node in backward is the TP all-reduce of activations' gradients,
    # not the loop's gradient all-reduce; one launched in backward under no TP range is.
    res, p = _purposes(
        [("a", 7, 10, 20), (AR, 20, 20, 40), ("b", 7, 50, 60), (AR, 20, 60, 80)],
        [
            ("## backward ##", 0, 100),
            ("_CopyToModelParallelRegionBackward", 15, 25),
        ],
        [5, 16, 30, 50],
    )
    assert p == ["gradient-allreduce", "tp-allreduce"]


def test_tp_slow_run_tp_and_dp_allreduces():
    # fixtures/workloads/tp_slow (README there): per step, 7 all-reduces in the TP groups
    # (tp_allreduce ranges, inside _ReduceFromTP / _CopyToTPBackward) and 1 data-parallel
    # gradient all-reduce (dp_allreduce in grad_sync); 3 steps on each of 4 ranks.
    from pathlib import Path

    a = analyze(Path(__file__).parent.parent / "fixtures" / "workloads" / "tp_slow")
    counts = a.collectives.per_rank.groupby("purpose").size().to_dict()
    assert counts == {"tp-allreduce": 4 * 3 * 7, "gradient-allreduce": 4 * 3}


def test_attach_purposes_majority_of_ranks_by_hand() -> None:
    import pandas as pd

    from traceoverlap.run.purpose import attach_purposes

    # local instances: (unit, lane, start) -> purpose; the second (0, "stream 7", 10) row is a
    # duplicate key: the first row's purpose wins
    local = pd.DataFrame(
        {
            "unit": [0, 0, 1, 2, 0],
            "lane": ["stream 7", "stream 7", "stream 7", "stream 7", "stream 7"],
            "start_ns": [10, 30, 11, 12, 10],
            "purpose": [
                "fsdp_allgather",
                "unknown",
                "ddp_gradient_allreduce",
                "fsdp_allgather",
                "x",
            ],
        }
    )
    # instance 0 on units 0, 1, 2: fsdp 2 votes, ddp 1 -> fsdp; instance 1: unit 0 says unknown
    # and unit 1 matches no local row (unknown) -> unknown; instance 2: a 1-1 tie -> the first
    # purpose in sort order; instance 3 has no per-rank row -> unknown
    per_rank = pd.DataFrame(
        {
            "instance": [0, 0, 0, 1, 1, 2, 2],
            "unit": [0, 1, 2, 0, 1, 1, 2],
            "lane": ["stream 7"] * 7,
            "start_ns": [10, 11, 12, 30, 99, 11, 12],
        }
    )
    instances = pd.DataFrame({"instance": [0, 1, 2, 3]})
    inst, pr = attach_purposes(instances, per_rank, local)
    assert pr["purpose"].tolist() == [
        "fsdp_allgather",
        "ddp_gradient_allreduce",
        "fsdp_allgather",
        "unknown",
        "unknown",
        "ddp_gradient_allreduce",
        "fsdp_allgather",
    ]
    assert inst["purpose"].tolist() == [
        "fsdp_allgather",
        "unknown",
        "ddp_gradient_allreduce",
        "unknown",
    ]


def test_alltoall_beside_an_expert_range_is_moe() -> None:
    # diagnosis.md §13: two all-to-alls launched at 5 and 105, under `dispatch` [0, 50) and
    # `combine` [100, 150); the `expert` range [60, 90) between them is on the unit but around
    # neither launch: the code path shows experts, so they are MoE's dispatch and combine. Without
    # the expert range the same all-to-alls are of unknown purpose (no MoE evidence).
    a2a = "ncclDevKernel_AllToAll_RING"
    kernels = [(a2a, 20, 10, 30), (a2a, 20, 110, 130)]
    ranges = [("dispatch", 0, 50), ("combine", 100, 150)]
    _, p = _purposes(kernels, [*ranges, ("expert", 60, 90)], [5, 105])
    assert p == ["moe-combine", "moe-dispatch"]
    _, p = _purposes(kernels, ranges, [5, 105])
    assert p == ["unknown"]
