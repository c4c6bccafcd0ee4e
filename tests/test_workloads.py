"""The reference workloads train correctly: every strategy = single-process training on the global batch.

Each rank averages its gradients over the group (sum, then divide by the world size). With equal
per-rank batches and a mean loss, mean over ranks of (mean over the rank's rows) = mean over all rows,
so after N steps every strategy must hold the parameters that one process gets by training on the
concatenation of the ranks' batches (``run_reference``), up to float32 summation-order noise.
The check uses SGD: it is linear in the gradient, so rounding noise of ~1e-9 stays ~1e-9. AdamW
divides by sqrt(v): for gradients near zero that noise can move a weight by up to lr (1e-5 seen),
which would hide nothing about the synchronisation and only make the tolerance meaningless.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the workloads need PyTorch")

from traceoverlap_workloads.__main__ import build_parser  # noqa: E402
from traceoverlap_workloads.models import PRESETS, build_model  # noqa: E402
from traceoverlap_workloads.strategies import Bucketed  # noqa: E402
from traceoverlap_workloads.train import run_reference  # noqa: E402

# Tests that start ranks or train are marked slow one by one; the rest (CLI parsing, bucket layout,
# the structure of the committed fixtures/workloads runs) are fast.

STEPS = ["--wait", "0", "--warmup", "1", "--steps", "2"]  # 3 optimizer steps in all


def _run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "traceoverlap_workloads", *args, "--out", str(tmp_path)]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env={**os.environ, **env}, check=False
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("strategy", "model", "extra"),
    [
        ("naive", "gpt", []),
        ("flat", "gpt", []),
        ("overlap", "gpt", []),
        ("bucketed", "gpt", []),
        ("ddp", "gpt", []),
        ("bucketed", "mlp", []),
        # the planted causes change timing only: a host delay (with its per-step barrier) and
        # the comm-heavy preset still train to the same parameters
        ("bucketed", "gpt", ["--host-delay-ms", "5"]),
        ("naive", "mlp", ["--preset", "comm-heavy"]),
    ],
)
def test_strategy_matches_single_process_training(
    strategy: str, model: str, extra: list[str], tmp_path: Path
) -> None:
    args = [
        "--strategy",
        strategy,
        "--model",
        model,
        "--world-size",
        "2",
        "--optimizer",
        "sgd",
        *extra,
        *STEPS,
    ]
    proc = _run([*args, "--save-params", "--profiler", "none"], tmp_path)
    assert proc.returncode == 0, proc.stderr

    reference = run_reference(build_parser().parse_args(args), world_size=2)
    for rank in (0, 1):
        got = torch.load(tmp_path / f"params_rank{rank}.pt")
        assert got.keys() == reference.keys()
        for name, want in reference.items():
            torch.testing.assert_close(got[name], want, rtol=1e-5, atol=1e-6, msg=name)
    # Guard against a vacuous pass: training must have moved the weights away from their init.
    torch.manual_seed(0)
    preset = PRESETS[build_parser().parse_args(args).preset]
    init = dict(build_model(model, preset, preset.seq_len).named_parameters())
    assert any(not torch.allclose(init[n], reference[n]) for n in reference)


@pytest.mark.slow
def test_a_crashed_rank_stops_the_others_with_a_clear_message(tmp_path: Path) -> None:
    # Rank 1 raises right after joining; rank 0 would otherwise wait in its first collective until
    # the process-group timeout (here 60 s). The launcher must kill it and name rank 1.
    t0 = time.monotonic()
    proc = _run(
        ["--strategy", "naive", "--world-size", "2", "--timeout", "60", *STEPS],
        tmp_path,
        TRACEOVERLAP_WORKLOADS_FAIL_RANK="1",
    )
    assert proc.returncode != 0
    assert "rank 1 failed" in proc.stderr
    assert time.monotonic() - t0 < 60  # well before the collective timeout: it did not hang


def test_buckets_follow_reverse_parameter_order_and_respect_the_cap() -> None:
    # Four parameters of 10, 20, 30, 40 floats (40, 80, 120, 160 bytes), cap 200 bytes. Reverse order
    # is 40f(160 B) | 30f(120 B): 280 > 200 -> new bucket | 20f(80 B): 200 <= 200 -> same | 10f(40 B):
    # 240 > 200 -> new bucket. So buckets [[p3], [p2, p1], [p0]].
    ps = torch.nn.ParameterList(torch.nn.Parameter(torch.zeros(n)) for n in (10, 20, 30, 40))
    strat = Bucketed(world_size=1, bucket_bytes=200)
    strat.prepare(ps)
    assert [[p.numel() for p in b] for b in strat.buckets] == [[40], [30, 20], [10]]


def test_cli_rejects_bad_step_counts() -> None:
    from traceoverlap_workloads.__main__ import main

    assert main(["--steps", "0"]) == 2
    assert main(["--host-delay-ms", "-1"]) == 2
    assert main(["--slow-ms", "-5"]) == 2


@pytest.mark.slow
@pytest.mark.parametrize(
    ("strategy", "after", "before"),
    # where --host-delay-ms sleeps (strategies.py): after the step's all-reduces were launched,
    # before the host waits for them and launches the optimizer
    [
        ("bucketed", "backward", "grad_sync"),  # hooks launched every bucket during backward
        ("ddp", "backward", "grad_sync"),  # DDP launches and waits inside backward
        ("naive", "grad_sync", "optimizer"),  # the all-reduce calls are in grad_sync
    ],
)
def test_host_delay_sleeps_between_the_launches_and_the_optimizer(
    strategy: str, after: str, before: str, tmp_path: Path
) -> None:
    from traceoverlap.run.analysis import load

    proc = _run(
        [
            "--strategy",
            strategy,
            "--world-size",
            "2",
            "--host-delay-ms",
            "30",
            *["--wait", "0", "--warmup", "1", "--steps", "1"],
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    ev = load(sorted(tmp_path.glob("rank*.json.gz"))).events
    for rank in (0, 1):
        delay = _only_range(ev, rank, "host_delay")
        prev, nxt = _only_range(ev, rank, after), _only_range(ev, rank, before)
        assert delay[1] - delay[0] >= 30_000_000
        assert prev[1] <= delay[0] and delay[1] <= nxt[0]
        # every rank enters backward after the barrier
        assert _only_range(ev, rank, "step_barrier")[1] <= _only_range(ev, rank, "backward")[0]


def _only_range(ev: Any, rank: int, name: str) -> tuple[int, int]:
    r = ev[(ev["rank"] == rank) & (ev["name"] == name)]
    assert len(r) == 1, (rank, name, len(r))
    return int(r["start_ns"].iloc[0]), int(r["end_ns"].iloc[0])


@pytest.mark.slow
def test_reference_oracle_is_deterministic_and_seeded() -> None:
    # Sanity of the test oracle itself: with world_size 1 the reference is plain training, so two
    # calls with the same seed agree exactly and a different seed disagrees.
    a = run_reference(build_parser().parse_args(STEPS), 1)
    b = run_reference(build_parser().parse_args(STEPS), 1)
    c = run_reference(build_parser().parse_args([*STEPS, "--seed", "1"]), 1)
    assert all(torch.equal(a[n], b[n]) for n in a)
    assert any(not torch.equal(a[n], c[n]) for n in a)


# --- the switches: --comm, --slow-phase, the model-parallel strategies -----------------------------


def test_parser_takes_the_new_switches() -> None:
    a = build_parser().parse_args([])
    assert (a.comm, a.slow_phase, a.tp_size, a.micro_batches) == ("on", "pre-backward", 2, 4)
    a = build_parser().parse_args(
        [
            *["--strategy", "tp", "--comm", "off", "--slow-rank", "3", "--slow-ms", "40"],
            *["--slow-phase", "forward", "--tp-size", "4", "--micro-batches", "8"],
        ]
    )
    assert (a.strategy, a.comm, a.slow_rank, a.slow_ms) == ("tp", "off", 3, 40.0)
    assert (a.slow_phase, a.tp_size, a.micro_batches) == ("forward", 4, 8)
    for strategy in ("pipeline", "fsdp", "moe"):
        assert build_parser().parse_args(["--strategy", strategy]).strategy == strategy
    for phase in ("dataloader", "backward", "optimizer"):
        assert build_parser().parse_args(["--slow-phase", phase]).slow_phase == phase
    assert build_parser().parse_args([]).gloo_loop == "default"
    assert build_parser().parse_args(["--gloo-loop", "idle"]).gloo_loop == "idle"


@pytest.mark.parametrize(
    "argv",
    [
        ["--comm", "maybe"],
        ["--slow-phase", "loss"],
        ["--strategy", "zero3"],
        ["--gloo-loop", "spin"],
    ],
)
def test_parser_rejects_unknown_choices(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)


def test_cli_rejects_bad_group_sizes() -> None:
    from traceoverlap_workloads.__main__ import main

    assert main(["--tp-size", "0"]) == 2
    assert main(["--micro-batches", "0"]) == 2
    assert main(["--strategy", "tp", "--host-delay-ms", "10"]) == 2  # data-parallel only


def test_tp_groups_are_consecutive_and_dp_groups_strided() -> None:
    from traceoverlap_workloads.parallel import tp_groups

    # world 4, tp 2: Megatron's layout, TP neighbours {0,1} {2,3}, DP across them {0,2} {1,3}
    assert tp_groups(4, 2) == ([[0, 1], [2, 3]], [[0, 2], [1, 3]])
    # world 8, tp 4: two TP groups of 4, four DP groups of 2
    assert tp_groups(8, 4) == ([[0, 1, 2, 3], [4, 5, 6, 7]], [[0, 4], [1, 5], [2, 6], [3, 7]])
    with pytest.raises(SystemExit, match="must divide"):
        tp_groups(4, 3)


# --- the committed model-parallel and what-if fixtures (fixtures/workloads/README.md) -------------

FIXTURE_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "workloads"
# name: (ranks, active steps, purposes that must appear on every rank)
NEW_FIXTURES: dict[str, tuple[int, int, set[str]]] = {
    "tp_slow": (4, 3, {"tp_allreduce", "dp_allreduce"}),
    "pipeline": (2, 3, {"pp_send", "pp_recv"}),
    "pipeline_slow_last": (2, 3, {"pp_send", "pp_recv"}),
    "fsdp": (2, 3, {"fsdp_allgather", "fsdp_reduce_scatter"}),
    "moe_slow": (4, 3, {"moe_dispatch", "moe_combine", "moe_dispatch_grad", "dp_allreduce"}),
    "naive_8": (2, 8, set()),
    "naive_slow": (2, 8, set()),
    "naive4": (4, 8, set()),
    "naive4_slow": (4, 8, set()),
    "overlap_8": (2, 8, set()),
    "overlap_commoff": (2, 8, set()),
}
PURPOSE_RE = r"^(\w+) pg=(\S+)(?: peer=(\d+))? bytes=(\d+)$"


def _trace(name: str, rank: int) -> dict[str, Any]:
    import gzip
    import json

    path = FIXTURE_DIR / name / f"rank{rank}.json.gz"
    if not path.is_file():
        pytest.skip(
            f"fixture not generated: {path} (python -m traceoverlap_workloads.make_fixtures)"
        )
    with gzip.open(path, "rt") as f:
        return json.load(f)  # type: ignore[no-any-return]


def _ranges(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        e
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") in ("user_annotation", "cpu_op")
    ]


@pytest.mark.parametrize("name", sorted(NEW_FIXTURES))
def test_fixture_ranks_groups_and_steps(name: str) -> None:
    import re

    ranks, steps, purposes = NEW_FIXTURES[name]
    assert sorted(p.name for p in (FIXTURE_DIR / name).glob("rank*.json.gz")) == [
        f"rank{r}.json.gz" for r in range(ranks)
    ]
    for rank in range(ranks):
        trace = _trace(name, rank)
        info = trace["distributedInfo"]
        assert (info["backend"], info["rank"], info["world_size"]) == ("gloo", rank, ranks)
        groups = {g["pg_name"]: g for g in info["pg_config"]}
        # every group listed is one this rank belongs to, the world among them
        assert all(rank in g["ranks"] and g["pg_size"] == len(g["ranks"]) for g in groups.values())
        assert groups["0"]["ranks"] == list(range(ranks))
        events = _ranges(trace)
        step_names = {e["name"] for e in events if e["name"].startswith("ProfilerStep#")}
        assert len(step_names) == steps
        seen = set()
        for e in events:
            m = re.match(PURPOSE_RE, e["name"])
            if m:
                seen.add(m.group(1))
                assert m.group(2) in groups, (
                    name,
                    rank,
                    e["name"],
                )  # pg= names a group of pg_config
        assert purposes <= seen, (name, rank, purposes - seen)
        phases = {e["name"] for e in events}
        assert {"dataloader", "forward", "backward", "optimizer"} <= phases


def test_tp_slow_groups_and_straggler() -> None:
    # tp_slow: TP groups {0,1} {2,3}, DP groups {0,2} {1,3}; rank 3 alone sleeps, inside forward,
    # before its first tp_allreduce of the step.
    import re

    for rank in range(4):
        trace = _trace("tp_slow", rank)
        by_desc = {g["pg_desc"]: g["ranks"] for g in trace["distributedInfo"]["pg_config"]}
        tp, dp = f"tp{rank // 2}", f"dp{rank % 2}"
        assert by_desc == {
            "default_pg": [0, 1, 2, 3],
            tp: [rank - rank % 2, rank - rank % 2 + 1],
            dp: [rank % 2, rank % 2 + 2],
        }
        name_of = {g["pg_desc"]: g["pg_name"] for g in trace["distributedInfo"]["pg_config"]}
        events = _ranges(trace)
        for e in events:
            m = re.match(PURPOSE_RE, e["name"])
            if m and m.group(1) == "tp_allreduce":
                assert m.group(2) == name_of[tp]
            if m and m.group(1) == "dp_allreduce":
                assert m.group(2) == name_of[dp]
        sleeps = [e for e in events if e["name"] == "straggler_sleep"]
        if rank != 3:
            assert not sleeps
            continue
        assert len(sleeps) == 3
        forwards = [e for e in events if e["name"] == "forward"]
        tps = [e for e in events if e["name"].startswith("tp_allreduce")]
        for s in sleeps:
            assert s["dur"] >= 40_000 * 0.99  # µs; the sleep lasts at least --slow-ms
            fwd = next(f for f in forwards if f["ts"] <= s["ts"] <= f["ts"] + f["dur"])
            first_tp = min(t["ts"] for t in tps if fwd["ts"] <= t["ts"] <= fwd["ts"] + fwd["dur"])
            assert s["ts"] + s["dur"] <= first_tp


def test_commoff_fixture_has_no_communication_but_the_same_ranges() -> None:
    # overlap_commoff is overlap_8 with every communication call skipped: no gloo worker events,
    # no c10d ops, but the launch / wait ranges of the same program, as many per step.
    def names(name: str) -> list[str]:
        return [e["name"] for e in _ranges(_trace(name, 0))]

    off, on = names("overlap_commoff"), names("overlap_8")
    assert not [n for n in off if n.startswith(("gloo:", "c10d::"))]
    assert [n for n in on if n.startswith("gloo:all_reduce")]
    launches_off = sorted(n for n in off if n.startswith("allreduce_launch#"))
    launches_on = sorted(n for n in on if n.startswith("allreduce_launch#"))
    assert launches_off == launches_on and launches_on


def test_slow_fixtures_sleep_only_on_the_planted_rank() -> None:
    for name, slow, ranks in (
        ("naive_slow", 1, 2),
        ("naive4_slow", 1, 4),
        ("moe_slow", 2, 4),
        ("moe_slow_regen", 2, 4),
        ("pipeline_slow_last", 1, 2),
        ("bucketed_idle_slow", 1, 2),
        ("ddp_idle_slow", 0, 2),
    ):
        for rank in range(ranks):
            n = sum(e["name"] == "straggler_sleep" for e in _ranges(_trace(name, rank)))
            assert (n > 0) == (rank == slow), (name, rank, n)
    for name, ranks in (
        ("naive_8", 2),
        ("naive4", 4),
        ("overlap_8", 2),
        ("fsdp", 2),
        ("bucketed_idle", 2),
        ("ddp_idle", 2),
    ):
        for rank in range(ranks):
            assert not [e for e in _ranges(_trace(name, rank)) if e["name"] == "straggler_sleep"]


# --- running the new strategies (slow) ------------------------------------------------------------

ONE_STEP = ["--wait", "0", "--warmup", "1", "--steps", "1"]


def _events(tmp_path: Path) -> Any:
    from traceoverlap.run.analysis import load

    return load(sorted(tmp_path.glob("rank*.json.gz"))).events


@pytest.mark.slow
@pytest.mark.parametrize(
    ("strategy", "world", "purposes", "collectives"),
    [
        ("tp", 4, {"tp_allreduce", "dp_allreduce"}, {"gloo:all_reduce"}),
        ("pipeline", 2, {"pp_send", "pp_recv"}, {"gloo:send", "gloo:recv"}),
        (
            "fsdp",
            2,
            {"fsdp_allgather", "fsdp_reduce_scatter"},
            {"gloo:all_gather", "gloo:all_reduce"},
        ),
        ("moe", 2, {"moe_dispatch", "moe_combine", "dp_allreduce"}, {"gloo:all_to_all"}),
    ],
)
def test_parallel_strategy_runs_and_names_its_communication(
    strategy: str, world: int, purposes: set[str], collectives: set[str], tmp_path: Path
) -> None:
    proc = _run(["--strategy", strategy, "--world-size", str(world), *ONE_STEP], tmp_path)
    assert proc.returncode == 0, proc.stderr
    ev = _events(tmp_path)
    assert sorted(ev["rank"].unique().tolist()) == list(range(world))
    for rank in range(world):
        names = set(ev[ev["rank"] == rank]["name"].astype(str))
        assert {"dataloader", "forward", "backward", "optimizer"} <= names
        assert purposes <= {n.split(" ", 1)[0] for n in names}, (rank, names)
        assert collectives <= names, (rank, collectives - names)


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["dataloader", "forward", "backward", "optimizer"])
def test_slow_phase_puts_the_sleep_at_the_start_of_that_phase(phase: str, tmp_path: Path) -> None:
    args = ["--strategy", "naive", "--model", "mlp", "--world-size", "2", *ONE_STEP]
    proc = _run([*args, "--slow-rank", "1", "--slow-ms", "30", "--slow-phase", phase], tmp_path)
    assert proc.returncode == 0, proc.stderr
    ev = _events(tmp_path)
    assert not len(ev[(ev["rank"] == 0) & (ev["name"] == "straggler_sleep")])
    sleep = _only_range(ev, 1, "straggler_sleep")
    outer = _only_range(ev, 1, phase)
    assert sleep[1] - sleep[0] >= 30_000_000
    assert outer[0] <= sleep[0] and sleep[1] <= outer[1]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["overlap", "ddp", "fsdp", "pipeline"])
def test_comm_off_issues_no_communication(strategy: str, tmp_path: Path) -> None:
    # --wait 1: ddp still communicates in its first two iterations (a shape check when built, the
    # bucket rebuild in the second forward), outside the profiled ones here (strategies.DDP)
    args = ["--strategy", strategy, "--world-size", "2", "--comm", "off"]
    proc = _run([*args, "--wait", "1", "--warmup", "1", "--steps", "1"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    names = set(_events(tmp_path)["name"].astype(str))
    assert {"forward", "backward", "optimizer"} <= names
    assert not [n for n in names if n.startswith(("gloo:", "c10d::"))], names


def _reference_mlp(kind: str, steps: int, rows: int) -> dict[str, Any]:
    """Single-process training of the fsdp / tp model on the global batch (SGD, as the runs)."""
    from torch.nn import functional as F

    from traceoverlap_workloads.models import MLP_CLASSES
    from traceoverlap_workloads.parallel import _batch

    p = PRESETS["tiny"]
    d = p.mlp_width
    torch.manual_seed(0)  # the runs' --seed 0, and the same construction order
    if kind in ("fsdp", "pipeline"):  # pipeline on 2 stages: 2 layers each, the head last
        lins = [torch.nn.Linear(d, d) for _ in range(p.mlp_layers)] + [torch.nn.Linear(d, 16)]
        params = [q for lin in lins for q in lin.parameters()]
    else:
        pairs = [
            (torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)) for _ in range(p.mlp_layers)
        ]
        head = torch.nn.Linear(d, MLP_CLASSES)
        params = [q for a, b in pairs for q in (*a.parameters(), *b.parameters())]
        params += list(head.parameters())
    opt = torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    for i in range(steps):
        x, y = _batch(p, rows, 1, 0, i, 0)
        if kind in ("fsdp", "pipeline"):
            for j, lin in enumerate(lins):
                x = lin(x) if j == len(lins) - 1 else F.relu(lin(x))
            loss = F.cross_entropy(x, y)
        else:
            for a, b in pairs:
                x = x + b(F.gelu(a(x)))
            loss = F.cross_entropy(head(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    if kind == "fsdp":
        return {"flat": [torch.cat([lin.weight.reshape(-1), lin.bias]).detach() for lin in lins]}
    return {"params": [q.detach() for q in params]}


@pytest.mark.slow
def test_pipeline_trains_like_one_process(tmp_path: Path) -> None:
    # 2 stages, 4 micro-batches of 16 rows: each micro-batch's loss is its mean / 4, so the
    # summed gradients are those of the mean over the 64 rows; stage 0 holds layers 0-1, stage 1
    # layers 2-3 and the head: rank 0's parameters then rank 1's = one process's, in order.
    args = ["--strategy", "pipeline", "--world-size", "2", "--optimizer", "sgd", *STEPS]
    proc = _run([*args, "--save-params", "--profiler", "none"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    got = [torch.load(tmp_path / f"params_rank{r}.pt") for r in (0, 1)]
    flat = [got[r][f"param{j}"] for r in (0, 1) for j in range(len(got[r]))]
    want = _reference_mlp("pipeline", 3, 64)["params"]
    init = _reference_mlp("pipeline", 0, 64)["params"]
    assert len(flat) == len(want) == 10
    assert any(not torch.allclose(a, b) for a, b in zip(want, init, strict=True))
    for j, (a, b) in enumerate(zip(flat, want, strict=True)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=f"param {j}")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fsdp", "tp"])
def test_fsdp_and_tp_train_like_one_process(kind: str, tmp_path: Path) -> None:
    # fsdp, 2 ranks of 64 rows: reduce-scatter SUM / 2 of per-rank mean-loss gradients = the
    # gradient of the mean over all 128 rows, so the gathered shards = one process on 128 rows.
    # tp, world 2 = one TP group of 2, no data parallelism: the sharded MLP computes exactly
    # the unsharded one on the same 64 rows.
    args = ["--strategy", kind, "--world-size", "2", "--optimizer", "sgd", *STEPS]
    proc = _run([*args, "--save-params", "--profiler", "none"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    got = [torch.load(tmp_path / f"params_rank{r}.pt") for r in (0, 1)]
    n = len(got[0])
    rows = 128 if kind == "fsdp" else 64
    # not vacuous: three SGD steps moved the reference away from its initial weights
    moved, init = _reference_mlp(kind, 3, rows), _reference_mlp(kind, 0, rows)
    assert any(
        not torch.allclose(a, b)
        for a, b in zip(*(next(iter(r.values())) for r in (moved, init)), strict=True)
    )
    if kind == "fsdp":
        want = _reference_mlp(kind, 3, 128)["flat"]
        assert n == len(want)
        for j, flat in enumerate(want):
            full = torch.cat([got[0][f"param{j}"], got[1][f"param{j}"]])[: flat.numel()]
            torch.testing.assert_close(full, flat, rtol=1e-5, atol=1e-6, msg=f"layer {j}")
        return
    want = _reference_mlp(kind, 3, 64)["params"]
    assert n == len(want)
    for j, ref in enumerate(want):
        a, b = got[0][f"param{j}"], got[1][f"param{j}"]
        if j >= n - 2 or j % 4 == 3:  # head, fc2 bias: replicated
            full = a
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
        else:  # w1, b1 split along dim 0, w2 along dim 1
            full = torch.cat([a, b], dim=1 if j % 4 == 2 else 0)
        torch.testing.assert_close(full, ref, rtol=1e-5, atol=1e-6, msg=f"param {j}")


def _named(trace: dict[str, Any], prefix: str) -> list[tuple[float, float]]:
    """(start, end) in µs of the ranges whose name starts with ``prefix``, in time order."""
    return sorted(
        (e["ts"], e["ts"] + e["dur"]) for e in _ranges(trace) if e["name"].startswith(prefix)
    )


@pytest.mark.parametrize(
    ("name", "slow", "waiter", "purpose"),
    [
        # rank 3 sleeps before its first tp_allreduce of the step; rank 2 (its TP peer) is in it
        ("tp_slow", 3, 2, "tp_allreduce"),
        # rank 2 sleeps at the start of forward; every other rank's moe_dispatch needs its chunk
        ("moe_slow", 2, 0, "moe_dispatch"),
        ("moe_slow", 2, 1, "moe_dispatch"),
        ("moe_slow", 2, 3, "moe_dispatch"),
        ("moe_slow_regen", 2, 0, "moe_dispatch"),
        ("moe_slow_regen", 2, 3, "moe_dispatch"),
    ],
)
def test_planted_peer_cannot_finish_before_the_sleeper_arrives(
    name: str, slow: int, waiter: int, purpose: str
) -> None:
    # Causality, not speed: a collective ends on no member before every member has entered it,
    # and the sleeper enters only after its straggler_sleep ends. So on the waiter, in each
    # step, the first `purpose` call that ends after the step's sleep started ends after the
    # sleep ended. (Kineto timestamps of processes on one host share a clock.)
    sleeps = _named(_trace(name, slow), "straggler_sleep")
    calls = _named(_trace(name, waiter), purpose)
    assert len(sleeps) == 3
    for start, end in sleeps:
        first = next(c for c in calls if c[1] > start)
        assert first[1] >= end, (start, end, first)


def test_long_last_stage_holds_the_first_stage() -> None:
    # pipeline_slow_last: stage 1 sleeps in each micro-batch forward, after its pp_recv. Stage 0
    # gets micro-batch k's gradient only after stage 1 ran every forward: stage 0's first
    # pp_recv (backward) of a step ends after stage 1's last sleep of that step ends.
    sleeps = _named(_trace("pipeline_slow_last", 1), "straggler_sleep")
    recvs = _named(_trace("pipeline_slow_last", 0), "pp_recv")
    assert len(sleeps) == 12 and len(recvs) == 12  # 3 steps x 4 micro-batches
    for step in range(3):
        last_sleep_end = sleeps[4 * step + 3][1]
        assert recvs[4 * step][1] >= last_sleep_end


@pytest.mark.slow
def test_moe_trains_like_one_process(tmp_path: Path) -> None:
    # 2 ranks of 64 rows, one expert each, capacity 2 * 64 / 2 = 64: no token is ever dropped.
    # Each token gets h + gate * expert[choice](h) whichever rank holds the expert; replicated
    # layers average the two ranks' mean-loss gradients and each expert's (summed over both
    # ranks' losses) is divided by 2: the gradient of the mean over all 128 rows.
    from torch.nn import functional as F

    from traceoverlap_workloads.models import MLP_CLASSES
    from traceoverlap_workloads.parallel import _batch

    args = ["--strategy", "moe", "--world-size", "2", "--optimizer", "sgd", *STEPS]
    proc = _run([*args, "--save-params", "--profiler", "none"], tmp_path)
    assert proc.returncode == 0, proc.stderr

    p = PRESETS["tiny"]
    d = p.mlp_width
    torch.manual_seed(0)
    inp, router = torch.nn.Linear(d, d), torch.nn.Linear(d, 2)
    experts = [
        torch.nn.Sequential(torch.nn.Linear(d, 2 * d), torch.nn.GELU(), torch.nn.Linear(2 * d, d))
        for _ in range(2)
    ]
    head = torch.nn.Linear(d, MLP_CLASSES)
    replicated = [*inp.parameters(), *router.parameters(), *head.parameters()]
    init = [q.detach().clone() for q in replicated]
    opt = torch.optim.SGD(
        [*replicated, *experts[0].parameters(), *experts[1].parameters()], lr=1e-3, momentum=0.9
    )
    for i in range(3):
        x, y = _batch(p, 128, 1, 0, i, 0)
        h = F.relu(inp(x))
        gate, choice = F.softmax(router(h), dim=-1).max(dim=-1)
        out = torch.stack([experts[e](h[t : t + 1])[0] for t, e in enumerate(choice.tolist())])
        F.cross_entropy(head(h + gate[:, None] * out), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    got = [torch.load(tmp_path / f"params_rank{r}.pt") for r in (0, 1)]
    assert any(not torch.allclose(a, b) for a, b in zip(replicated, init, strict=True))
    for r in (0, 1):
        mine = [*replicated, *experts[r].parameters()]
        assert len(got[r]) == len(mine)
        for j, want in enumerate(mine):
            torch.testing.assert_close(got[r][f"param{j}"], want.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_gloo_loop_idle_lowers_every_loop_thread_and_still_trains(tmp_path: Path) -> None:
    # --gloo-loop idle: once the process groups exist, each rank puts its gloo TCP loop threads
    # (one per gloo device) at SCHED_IDLE and says how many; the run still completes and traces
    res = _run(
        ["--strategy", "tp", "--world-size", "4", "--gloo-loop", "idle", *ONE_STEP], tmp_path
    )
    assert res.returncode == 0, res.stderr
    import re

    m = re.search(r"(\d+) gloo_tcp_loop thread\(s\) of rank 0 at SCHED_IDLE", res.stderr)
    assert m is not None and int(m.group(1)) >= 1, res.stderr
    assert len(list(tmp_path.glob("rank*.json.gz"))) == 4
    # more ranks than cores: the starving loop threads are named in a warning
    crowded = f"warning: 4 ranks on {os.cpu_count()} cores" in res.stderr
    assert crowded == ((os.cpu_count() or 1) < 4), res.stderr


def test_idle_gloo_loops_touches_only_gloo_loop_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    # the threads are picked by name (/proc/self/task/*/comm): this test process has no gloo
    # loop thread, so nothing is changed and the count is 0
    from traceoverlap_workloads.train import idle_gloo_loops

    calls: list[int] = []
    monkeypatch.setattr(os, "sched_setscheduler", lambda tid, *a: calls.append(tid))
    assert idle_gloo_loops() == 0 and calls == []


# --- causes planted in alternate steps (plant.py, docs/whatif.md §5) -------------------------


def test_planted_steps_are_the_even_ones() -> None:
    from traceoverlap_workloads import plant

    # --slow-every 2: i % 2 == 0 sleeps; 3: every third; 1 (the default): every step
    assert [plant.sleeps_in(i, 2) for i in range(5)] == [True, False, True, False, True]
    assert [plant.sleeps_in(i, 3) for i in range(4)] == [True, False, False, True]
    assert all(plant.sleeps_in(i, 1) for i in range(4))
    # --comm alternate: off where planted (even), on in the odd steps; on / off as before
    assert [plant.comm_on_in(i, "alternate") for i in range(4)] == [False, True, False, True]
    assert all(plant.comm_on_in(i, "on") for i in range(4))
    assert not any(plant.comm_on_in(i, "off") for i in range(4))
    # the marks: only where a cause is planted in some steps, not every one
    assert plant.marks(2, 2, True, "on") == [plant.MARK_SLOW]
    assert plant.marks(3, 2, True, "on") == []
    assert plant.marks(2, 1, True, "on") == []  # every step slow: nothing to tell apart
    assert plant.marks(2, 2, False, "on") == []  # no straggler
    assert plant.marks(4, 2, True, "alternate") == [plant.MARK_SLOW, plant.MARK_COMM_OFF]
    assert plant.marks(5, 1, False, "alternate") == []
    # the analysis must not take the marks for host causes (rank/unit.py's HOST_CAUSE_RE)
    from traceoverlap.rank.unit import HOST_CAUSE_RE

    assert not HOST_CAUSE_RE.search(plant.MARK_SLOW)
    assert not HOST_CAUSE_RE.search(plant.MARK_COMM_OFF)


def test_parser_takes_slow_every_and_comm_alternate() -> None:
    from traceoverlap_workloads.__main__ import main

    a = build_parser().parse_args([])
    assert (a.slow_every, a.comm) == (1, "on")
    a = build_parser().parse_args(["--slow-every", "2", "--comm", "alternate"])
    assert (a.slow_every, a.comm) == (2, "alternate")
    assert main(["--slow-every", "0"]) == 2


def _raw_events(folder: Path, rank: int) -> list[dict[str, Any]]:
    import gzip
    import json

    with gzip.open(folder / f"rank{rank}.json.gz", "rt") as f:
        return list(json.load(f)["traceEvents"])


def _step_of(events: list[dict[str, Any]]) -> Any:
    steps = sorted(
        (e["ts"], e["ts"] + e.get("dur", 0), int(e["name"].split("#")[1]))
        for e in events
        if str(e.get("name", "")).startswith("ProfilerStep#")
    )

    def of(ts: float) -> int:
        return next(n for s, end, n in steps if s <= ts <= end)

    return of


@pytest.mark.slow
def test_straggler_and_comm_off_planted_in_even_steps_only(tmp_path: Path) -> None:
    # 4 profiled steps (2-5) after --wait 1 --warmup 1: rank 1 sleeps in 2 and 4 only, every
    # rank marks 2 and 4; communication (gloo events) only in 3 and 5
    args = ["--strategy", "naive", "--model", "mlp", "--world-size", "2"]
    args += ["--wait", "1", "--warmup", "1", "--steps", "4", "--slow-rank", "1"]
    args += ["--slow-ms", "20", "--slow-every", "2", "--comm", "alternate"]
    proc = _run(args, tmp_path, OMP_NUM_THREADS="1")
    assert proc.returncode == 0, proc.stderr
    from traceoverlap_workloads import plant

    for rank in (0, 1):
        ev = _raw_events(tmp_path, rank)
        of = _step_of(ev)

        def steps(prefix: str, ev: list[dict[str, Any]] = ev, of: Any = of) -> list[int]:
            return sorted({of(e["ts"]) for e in ev if str(e.get("name", "")).startswith(prefix)})

        assert steps(plant.MARK_SLOW) == [2, 4]
        assert steps(plant.MARK_COMM_OFF) == [2, 4]
        assert steps("straggler_sleep") == ([2, 4] if rank == 1 else [])
        assert steps("gloo:") == [3, 5]
