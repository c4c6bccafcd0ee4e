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

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch", reason="the workloads need PyTorch")

from traceoverlap_workloads.__main__ import build_parser  # noqa: E402
from traceoverlap_workloads.models import PRESETS, build_model  # noqa: E402
from traceoverlap_workloads.strategies import Bucketed  # noqa: E402
from traceoverlap_workloads.train import run_reference  # noqa: E402

STEPS = ["--wait", "0", "--warmup", "1", "--steps", "2"]  # 3 optimizer steps in all


def _run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "traceoverlap_workloads", *args, "--out", str(tmp_path)]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env={**os.environ, **env}, check=False
    )


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
    from traceoverlap.analysis import load

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


def test_reference_oracle_is_deterministic_and_seeded() -> None:
    # Sanity of the test oracle itself: with world_size 1 the reference is plain training, so two
    # calls with the same seed agree exactly and a different seed disagrees.
    a = run_reference(build_parser().parse_args(STEPS), 1)
    b = run_reference(build_parser().parse_args(STEPS), 1)
    c = run_reference(build_parser().parse_args([*STEPS, "--seed", "1"]), 1)
    assert all(torch.equal(a[n], b[n]) for n in a)
    assert any(not torch.equal(a[n], c[n]) for n in a)
