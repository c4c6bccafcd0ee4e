"""The diagnosis benchmark's scenarios and their ground truth (issue 38).

Each entry of :data:`SCENARIOS` is one recorded run: ``name``, ``script`` (a file of
``styles/``), ``args`` (its flags; ``record.py`` adds ``--seed`` and ``--out``), ``world_size``,
``ranks_kept`` (None: every rank; a list: the others are recorded then dropped, a partial run),
``seed`` and ``truth``. The truth is written from the construction (what the flags plant), before
any analysis, and is never changed because a tool gets it wrong.

Truth fields:
- ``straggler``: the rank that made the others wait (the root of the chain: a rank that only
  waited for another is not it), or None: no planted straggler, a straggler that moves, or one
  that is not among the kept ranks.
- ``moving``: the slow rank changes from step to step (``--moving``: step i slows rank
  (R + i) % world).
- ``root_rank``: the rank whose own work explains the lateness; ``root_op``: the range (or op)
  open on it during that lateness, the deepest one that explains most of it (``dataloader``,
  ``save_checkpoint``, ``expert``...). None where the lateness is spread over every compute range
  (uneven batches, CPU contention) or nothing is planted.
- ``cause``: the main cause class of the exposed communication time: ``wait`` (a peer was late),
  ``transfer`` (moving bytes, nobody late), ``dependency`` (compute blocked on the communication:
  a blocking call, an all-gather without prefetch), ``host`` (the host was not ready: a late
  wake-up), ``blocked`` (a thread blocked in a call with no worker event), ``unmatched`` (the
  peers are not in the trace: a partial run, so wait and transfer cannot be told), ``none``
  (nothing planted: whatever exposed time there is, no cause was put there).
- ``verdict``: the bottleneck class expected for most rank-steps, or None where the construction
  does not decide it (a healthy run on a loaded CPU host); ``verdict_per_rank``: classes the
  construction decides for single ranks (ranks absent from it are not scored). A rank that sleeps
  in a range runs nothing meanwhile: ``idle-bound``; the ranks that wait for it in a collective:
  ``peer-wait-bound``.
- ``purpose``: the purpose (traceoverlap.core.vocab.Purpose) of the collective that carries most
  of the exposed time, or None when it is not decided; ``purpose_also``: other purposes that are
  right too (MoE dispatch and combine are both the expert all-to-all).
- ``advice_must`` / ``advice_must_not``: regexes the run's advice and findings text must / must not
  match (every run is gloo on CPU: no CUDA-graph advice).
- ``healthy``: nothing was planted. ``hang``: the run hangs (none here: the Flight Recorder
  fixtures cover hangs). ``notes``: how the cause was planted and why the truth says what it says.
"""

from __future__ import annotations

from typing import Any

CPU_ONLY = r"(?i)cuda graph"
PARTIAL_MUST = r"(?i)missing rank|ranks? (are )?missing|of \d+ ranks|ranks given|not in the trace"
NO_BANDWIDTH = r"(?i)faster interconnect"
NO_BUCKETS = r"(?i)bucket"

SLOW = 60  # ms a planted sleep or busy loop adds per step (per call where noted)


def _truth(**kw: Any) -> dict[str, Any]:
    t: dict[str, Any] = {
        "straggler": None,
        "moving": False,
        "root_rank": None,
        "root_op": None,
        "cause": "none",
        "verdict": None,
        "verdict_per_rank": {},
        "purpose": None,
        "purpose_also": [],
        "advice_must": [],
        "advice_must_not": [CPU_ONLY],
        "healthy": False,
        "hang": False,
        "notes": "",
    }
    extra_not = kw.pop("advice_must_not", [])
    t.update(kw)
    t["advice_must_not"] = [CPU_ONLY, *extra_not]
    return t


def healthy(purpose: str | None, notes: str, cause: str = "none", **kw: Any) -> dict[str, Any]:
    return _truth(purpose=purpose, cause=cause, healthy=True, notes=notes, **kw)


def straggler(
    rank: int,
    op: str | None,
    world: int,
    purpose: str | None,
    notes: str,
    sleep: bool = True,
    **kw: Any,
) -> dict[str, Any]:
    """A planted straggler in a synchronous collective: the others wait for ``rank``."""
    per_rank: dict[str, str] = {str(r): "peer-wait-bound" for r in range(world) if r != rank}
    if sleep:
        per_rank[str(rank)] = "idle-bound"
    verdict = "peer-wait-bound" if world > 2 else None
    must = kw.pop("advice_must", [])
    return _truth(
        straggler=rank,
        root_rank=rank,
        root_op=op,
        cause="wait",
        verdict=verdict,
        verdict_per_rank=kw.pop("verdict_per_rank", per_rank),
        purpose=purpose,
        advice_must=must,
        notes=notes,
        **kw,
    )


def moving(op: str, purpose: str | None, world: int, notes: str, **kw: Any) -> dict[str, Any]:
    return _truth(
        moving=True,
        root_op=op,
        cause="wait",
        verdict="peer-wait-bound" if world > 2 else None,
        purpose=purpose,
        notes=notes,
        **kw,
    )


def partial(
    purpose: str | None, notes: str, straggler_rank: int | None = None, **kw: Any
) -> dict[str, Any]:
    return _truth(
        straggler=straggler_rank,
        root_rank=straggler_rank,
        cause="unmatched",
        purpose=purpose,
        advice_must=[PARTIAL_MUST],
        advice_must_not=[NO_BANDWIDTH, *kw.pop("advice_must_not", [])],
        notes=notes,
        **kw,
    )


def sleep_args(rank: int, rng: str, ms: float = SLOW, kind: str = "sleep") -> list[str]:
    return [
        "--slow-rank",
        str(rank),
        "--slow-range",
        rng,
        "--slow-ms",
        str(ms),
        "--slow-kind",
        kind,
    ]


S: list[dict[str, Any]] = []


def add(
    name: str,
    script: str,
    world: int,
    args: list[str],
    truth: dict[str, Any],
    ranks_kept: list[int] | None = None,
    seed: int = 0,
) -> None:
    S.append(
        {
            "name": name,
            "script": script,
            "args": args,
            "world_size": world,
            "ranks_kept": ranks_kept,
            "seed": seed if seed else len(S) + 1,
            "truth": truth,
        }
    )


GA, DDPA, FAG = "gradient-allreduce", "ddp-gradient-allreduce", "fsdp-allgather"
TP, PP, OPT = "tp-allreduce", "pipeline-p2p", "optimizer-collective"
MOE_ALSO = ["moe-alltoall", "moe-dispatch", "moe-combine"]

# --- data parallel, hooks (async all-reduce per gradient from a post-accumulate hook) ----------
add(
    "hooks_healthy_2",
    "dp_hooks.py",
    2,
    [],
    healthy(GA, "hook-launched async all-reduce per parameter, nothing planted"),
)
add(
    "hooks_dataloader_r1_2",
    "dp_hooks.py",
    2,
    sleep_args(1, "dataloader"),
    straggler(
        1,
        "dataloader",
        2,
        GA,
        "rank 1 sleeps 60 ms in dataloader every step; rank 0 waits in the gradient all-reduces",
        advice_must=[r"(?i)data ?load"],
    ),
)
add(
    "hooks_checkpoint_r3_4",
    "dp_hooks.py",
    4,
    sleep_args(3, "save_checkpoint"),
    straggler(
        3,
        "save_checkpoint",
        4,
        GA,
        "rank 3 sleeps 60 ms in save_checkpoint (end of step); the others wait in the next step's all-reduces",
        advice_must=[r"(?i)checkpoint"],
    ),
)
add(
    "hooks_moving_4",
    "dp_hooks.py",
    4,
    [*sleep_args(0, "dataloader"), "--moving"],
    moving(
        "dataloader",
        GA,
        4,
        "dataloader sleep of 60 ms on rank (step % 4): the late rank moves every step",
    ),
)
add(
    "hooks_uneven_r2_4",
    "dp_hooks.py",
    4,
    ["--uneven-rank", "2", "--uneven-factor", "6"],
    straggler(
        2,
        None,
        4,
        GA,
        "rank 2's batch is 6x the others': more forward and backward compute, spread over both",
        sleep=False,
    ),
)
add(
    "hooks_poll_wake_2",
    "dp_hooks.py",
    2,
    ["--poll-ms", "15"],
    _truth(
        cause="host",
        purpose=GA,
        notes="every rank polls its all-reduce handles with 15 ms sleeps instead of wait(): the host wakes late after the communication ended; nobody is a straggler",
    ),
)
add(
    "hooks_partial_2of4",
    "dp_hooks.py",
    4,
    sleep_args(3, "dataloader"),
    partial(
        GA,
        "4-rank run, rank 3 sleeps 60 ms in dataloader; only ranks 0 and 1 kept: the late rank is missing, no kept rank is the straggler",
    ),
    ranks_kept=[0, 1],
)

# --- DDP -------------------------------------------------------------------------------------
add("ddp_healthy_2", "ddp.py", 2, [], healthy(DDPA, "DDP, 1 MB buckets, nothing planted"))
add("ddp_healthy_4", "ddp.py", 4, [], healthy(DDPA, "DDP, 1 MB buckets, nothing planted"))
add(
    "ddp_dataloader_r0_4",
    "ddp.py",
    4,
    sleep_args(0, "dataloader"),
    straggler(
        0,
        "dataloader",
        4,
        DDPA,
        "rank 0 sleeps 60 ms in dataloader; the others wait in DDP's bucket all-reduces",
        advice_must=[r"(?i)data ?load"],
    ),
)
add(
    "ddp_checkpoint_r1_2",
    "ddp.py",
    2,
    sleep_args(1, "save_checkpoint"),
    straggler(
        1,
        "save_checkpoint",
        2,
        DDPA,
        "rank 1 sleeps 60 ms in save_checkpoint after the optimizer",
        advice_must=[r"(?i)checkpoint"],
    ),
)
add(
    "ddp_optimizer_busy_r2_4",
    "ddp.py",
    4,
    sleep_args(2, "optimizer", kind="compute"),
    straggler(
        2,
        "optimizer",
        4,
        DDPA,
        "rank 2 runs 60 ms of extra matmuls inside optimizer (compute, not a sleep)",
        sleep=False,
    ),
)
add(
    "ddp_contention_r1_2",
    "ddp.py",
    2,
    ["--contention-rank", "1"],
    straggler(
        1,
        None,
        2,
        DDPA,
        "rank 1 is pinned to CPU 0 with two busy-looping processes: all its compute is slower",
        sleep=False,
    ),
)
add(
    "ddp_contention_r3_4",
    "ddp.py",
    4,
    ["--contention-rank", "3"],
    straggler(
        3,
        None,
        4,
        DDPA,
        "rank 3 is pinned to CPU 0 with two busy-looping processes: all its compute is slower",
        sleep=False,
    ),
)
add(
    "ddp_moving_ckpt_4",
    "ddp.py",
    4,
    [*sleep_args(1, "save_checkpoint"), "--moving"],
    moving("save_checkpoint", DDPA, 4, "save_checkpoint sleep of 60 ms on rank ((1 + step) % 4)"),
)
add(
    "ddp_uneven_r1_2",
    "ddp.py",
    2,
    ["--uneven-rank", "1", "--uneven-factor", "5"],
    straggler(1, None, 2, DDPA, "rank 1's batch is 5x rank 0's", sleep=False),
)
add(
    "ddp_partial_3of4",
    "ddp.py",
    4,
    sleep_args(1, "dataloader"),
    partial(
        DDPA,
        "rank 1 sleeps 60 ms in dataloader; ranks 0-2 kept (rank 3 dropped): the straggler is kept, but every all-reduce misses a peer",
        straggler_rank=1,
        root_op="dataloader",
    ),
    ranks_kept=[0, 1, 2],
)
add(
    "ddp8_dataloader_r5",
    "ddp.py",
    8,
    [*sleep_args(5, "dataloader", 80), "--steps", "4"],
    straggler(
        5,
        "dataloader",
        8,
        DDPA,
        "8 ranks, rank 5 sleeps 80 ms in dataloader",
        advice_must=[r"(?i)data ?load"],
    ),
)
add(
    "ddp8_partial_keep4",
    "ddp.py",
    8,
    [*sleep_args(6, "dataloader", 80), "--steps", "4"],
    partial(
        DDPA,
        "8 ranks, rank 6 sleeps 80 ms in dataloader; only ranks 0-3 kept: the late rank is missing",
    ),
    ranks_kept=[0, 1, 2, 3],
)

# --- DDP with no_sync accumulation ---------------------------------------------------------------
add(
    "nosync_healthy_2",
    "ddp_nosync.py",
    2,
    [],
    healthy(DDPA, "3 micro-batches, the first two under no_sync; nothing planted"),
)
add(
    "nosync_fetch_r1_2",
    "ddp_nosync.py",
    2,
    sleep_args(1, "fetch_batch", 25),
    straggler(
        1,
        "fetch_batch",
        2,
        DDPA,
        "rank 1 sleeps 25 ms in every fetch_batch (3 per step, 75 ms): rank 0 waits in the syncing micro-batch's all-reduce",
    ),
)
add(
    "nosync_moving_4",
    "ddp_nosync.py",
    4,
    [*sleep_args(0, "fetch_batch", 20), "--moving"],
    moving("fetch_batch", DDPA, 4, "fetch_batch sleeps 20 ms per micro-batch on rank (step % 4)"),
)
add(
    "nosync_uneven_r0_4",
    "ddp_nosync.py",
    4,
    ["--uneven-rank", "0", "--uneven-factor", "5"],
    straggler(0, None, 4, DDPA, "rank 0's micro-batches are 5x the others'", sleep=False),
)

# --- bucketed by hand, after backward ----------------------------------------------------------
add(
    "bucketed_healthy_4",
    "dp_bucketed.py",
    4,
    [],
    healthy(
        GA,
        "hand-made 256 KiB buckets all-reduced after backward",
        advice_must_not=[r"(?i)(use|enable|add) bucket"],
    ),
)
add(
    "bucketed_data_r2_4",
    "dp_bucketed.py",
    4,
    sleep_args(2, "data"),
    straggler(
        2,
        "data",
        4,
        GA,
        "rank 2 sleeps 60 ms in its data range",
        advice_must_not=[r"(?i)(use|enable|add) bucket"],
    ),
)
add(
    "bucketed_apply_busy_r1_2",
    "dp_bucketed.py",
    2,
    sleep_args(1, "apply", kind="compute"),
    straggler(
        1,
        "apply",
        2,
        GA,
        "rank 1 computes 60 ms more in apply (the parameter update after the all-reduce): it arrives late at the next step's buckets",
        sleep=False,
    ),
)
add(
    "bucketed_poll_wake_4",
    "dp_bucketed.py",
    4,
    ["--poll-ms", "15"],
    _truth(
        cause="host",
        purpose=GA,
        notes="every rank polls each bucket's handle with 15 ms sleeps: late wake-ups after the all-reduces ended; no straggler",
    ),
)
add(
    "bucketed_contention_r0_2",
    "dp_bucketed.py",
    2,
    ["--contention-rank", "0"],
    straggler(0, None, 2, GA, "rank 0 pinned to CPU 0 with two busy processes", sleep=False),
)

# --- plain blocking all-reduce after backward ------------------------------------------------
add(
    "blocking_healthy_2",
    "dp_blocking.py",
    2,
    [],
    healthy(
        GA,
        "one blocking all-reduce per parameter after backward: compute waits on each (dependency), nothing planted",
        cause="dependency",
    ),
)
add(
    "blocking_batch_r1_4",
    "dp_blocking.py",
    4,
    sleep_args(1, "get_batch"),
    straggler(1, "get_batch", 4, GA, "rank 1 sleeps 60 ms in get_batch"),
)
add(
    "blocking_checkpoint_r0_2",
    "dp_blocking.py",
    2,
    sleep_args(0, "save_checkpoint"),
    straggler(
        0,
        "save_checkpoint",
        2,
        GA,
        "rank 0 sleeps 60 ms in save_checkpoint",
        advice_must=[r"(?i)checkpoint"],
    ),
)
add(
    "blocking_uneven_r3_4",
    "dp_blocking.py",
    4,
    ["--uneven-rank", "3", "--uneven-factor", "6"],
    straggler(3, None, 4, GA, "rank 3's batch is 6x the others'", sleep=False),
)
add(
    "blocking_partial_1of2",
    "dp_blocking.py",
    2,
    sleep_args(1, "get_batch"),
    partial(
        GA,
        "rank 1 sleeps 60 ms in get_batch; only rank 0 kept: a single-rank trace whose waiting cannot be told from transfer",
    ),
    ranks_kept=[0],
)

# --- tensor parallel groups ------------------------------------------------------------------
add(
    "tp_healthy_2",
    "tp_groups.py",
    2,
    ["--tp", "2"],
    healthy(
        TP,
        "tp=2: all-reduce of the row-parallel output in forward (and of the input grad in backward); nothing planted",
    ),
)
add(
    "tp_dp_healthy_4",
    "tp_groups.py",
    4,
    ["--tp", "2"],
    healthy(None, "tp=2 x dp=2 on new_group groups; nothing planted"),
)
add(
    "tp_dp_dataloader_r1_4",
    "tp_groups.py",
    4,
    ["--tp", "2", *sleep_args(1, "dataloader")],
    straggler(
        1,
        "dataloader",
        4,
        GA,
        "tp=2 x dp=2, rank 1 sleeps 60 ms in dataloader: rank 0 (its tp peer) waits in the tp all-reduce, rank 3 (its dp peer) in the dp gradient all-reduce, rank 2 in the dp all-reduce behind rank 0: two of three waiters wait in the gradient all-reduce",
        purpose_also=[TP],
        advice_must=[r"(?i)data ?load"],
    ),
)
add(
    "tp_forward_busy_r0_2",
    "tp_groups.py",
    2,
    ["--tp", "2", *sleep_args(0, "tp_forward", kind="compute")],
    straggler(
        0,
        "tp_forward",
        2,
        TP,
        "tp=2, rank 0 computes 60 ms more inside tp_forward before the first tp all-reduce",
        sleep=False,
    ),
)
add(
    "tp_dp_moving_4",
    "tp_groups.py",
    4,
    ["--tp", "2", *sleep_args(0, "dataloader", 50), "--moving"],
    moving("dataloader", None, 4, "tp=2 x dp=2, dataloader sleep of 50 ms on rank (step % 4)"),
)
add(
    "tp_dp_contention_r2_4",
    "tp_groups.py",
    4,
    ["--tp", "2", "--contention-rank", "2"],
    straggler(
        2, None, 4, None, "tp=2 x dp=2, rank 2 pinned to CPU 0 with two busy processes", sleep=False
    ),
)

# --- pipelines -------------------------------------------------------------------------------
PIPE_NOT = [r"(?i)bucket"]
add(
    "pipe_gpipe_blocking_healthy_2",
    "pipeline.py",
    2,
    ["--schedule", "gpipe", "--p2p", "blocking"],
    healthy(
        PP,
        "GPipe, 2 stages, 4 micro-batches, blocking send/recv; the bubbles are the schedule's, nothing planted",
        advice_must_not=PIPE_NOT,
    ),
)
add(
    "pipe_gpipe_blocking_healthy_4",
    "pipeline.py",
    4,
    ["--schedule", "gpipe", "--p2p", "blocking"],
    healthy(
        PP,
        "GPipe, 4 stages, 4 micro-batches, blocking send/recv; nothing planted",
        advice_must_not=PIPE_NOT,
    ),
)
add(
    "pipe_1f1b_isend_healthy_4",
    "pipeline.py",
    4,
    ["--schedule", "1f1b", "--p2p", "isend"],
    healthy(PP, "1F1B, 4 stages, isend/irecv; nothing planted", advice_must_not=PIPE_NOT),
)
add(
    "pipe_1f1b_batch_healthy_2",
    "pipeline.py",
    2,
    ["--schedule", "1f1b", "--p2p", "batch"],
    healthy(PP, "1F1B, 2 stages, batch_isend_irecv; nothing planted", advice_must_not=PIPE_NOT),
)
add(
    "pipe_gpipe_isend_fwd_busy_r1_4",
    "pipeline.py",
    4,
    ["--schedule", "gpipe", "--p2p", "isend", *sleep_args(1, "stage_forward", 12, "compute")],
    straggler(
        1,
        "stage_forward",
        4,
        PP,
        "GPipe, stage 1 computes 12 ms more in every stage_forward (4 per step): the stages after it wait on their recv",
        sleep=False,
        advice_must_not=PIPE_NOT,
    ),
)
add(
    "pipe_1f1b_blocking_bwd_sleep_r2_4",
    "pipeline.py",
    4,
    ["--schedule", "1f1b", "--p2p", "blocking", *sleep_args(2, "stage_backward", 12)],
    straggler(
        2,
        "stage_backward",
        4,
        PP,
        "1F1B blocking, stage 2 sleeps 12 ms in every stage_backward (4 per step)",
        verdict_per_rank={},
        advice_must_not=PIPE_NOT,
    ),
)
add(
    "pipe_1f1b_batch_dataloader_r0_4",
    "pipeline.py",
    4,
    ["--schedule", "1f1b", "--p2p", "batch", *sleep_args(0, "dataloader")],
    straggler(
        0,
        "dataloader",
        4,
        PP,
        "1F1B batch_isend_irecv, the first stage sleeps 60 ms in dataloader before its micro-batches",
        verdict_per_rank={},
        advice_must_not=PIPE_NOT,
    ),
)
add(
    "pipe_1f1b_isend_contention_r3_4",
    "pipeline.py",
    4,
    ["--schedule", "1f1b", "--p2p", "isend", "--contention-rank", "3"],
    straggler(
        3,
        None,
        4,
        PP,
        "1F1B isend, the last stage pinned to CPU 0 with two busy processes",
        sleep=False,
        verdict_per_rank={},
        advice_must_not=PIPE_NOT,
    ),
)
add(
    "pipe_gpipe_batch_partial_2of4",
    "pipeline.py",
    4,
    ["--schedule", "gpipe", "--p2p", "batch", *sleep_args(1, "stage_forward", 12, "compute")],
    partial(
        PP,
        "GPipe batch_isend_irecv, stage 1 computes 12 ms more per stage_forward; only stages 2 and 3 kept: stage 2's recvs from stage 1 have no peer in the trace",
        advice_must_not=PIPE_NOT,
    ),
    ranks_kept=[2, 3],
)

# --- ZeRO-3 / FSDP style by hand ---------------------------------------------------------------
add(
    "zero3_noprefetch_healthy_2",
    "zero3.py",
    2,
    [],
    healthy(
        FAG,
        "each layer's weight all-gathered just before it runs: compute depends on it (no prefetch); nothing planted",
        cause="dependency",
        purpose_also=["fsdp-reducescatter"],
        advice_must=[r"(?i)prefetch"],
    ),
)
add(
    "zero3_prefetch_healthy_4",
    "zero3.py",
    4,
    ["--prefetch"],
    healthy(
        FAG,
        "next layer's all-gather launched before the current layer computes: prefetch already on; nothing planted",
        purpose_also=["fsdp-reducescatter"],
        advice_must_not=[r"(?i)(enable|turn on|use|add) (forward[ -]?)?prefetch"],
    ),
)
add(
    "zero3_noprefetch_dataloader_r1_4",
    "zero3.py",
    4,
    sleep_args(1, "dataloader"),
    straggler(
        1,
        "dataloader",
        4,
        FAG,
        "no prefetch; rank 1 sleeps 60 ms in dataloader: the others wait in the first layer's all-gather",
        advice_must=[r"(?i)data ?load"],
    ),
)
add(
    "zero3_prefetch_layer_busy_r2_4",
    "zero3.py",
    4,
    ["--prefetch", *sleep_args(2, "layer_compute", 10, "compute")],
    straggler(
        2,
        "layer_compute",
        4,
        FAG,
        "prefetch on; rank 2 computes 10 ms more in every layer_compute (6 per step): the others wait in the next all-gathers",
        sleep=False,
    ),
)
add(
    "zero3_partial_3of4",
    "zero3.py",
    4,
    sleep_args(3, "dataloader"),
    partial(
        FAG,
        "no prefetch; rank 3 sleeps 60 ms in dataloader; ranks 0-2 kept: the late rank is missing",
    ),
    ranks_kept=[0, 1, 2],
)

# --- MoE all-to-all ----------------------------------------------------------------------------
add(
    "moe_even_healthy_4",
    "moe.py",
    4,
    ["--routing", "even"],
    healthy(
        "moe-alltoall", "even routing, 256 tokens per rank, nothing planted", purpose_also=MOE_ALSO
    ),
)
add(
    "moe_even_healthy_2",
    "moe.py",
    2,
    ["--routing", "even"],
    healthy("moe-alltoall", "even routing, nothing planted", purpose_also=MOE_ALSO),
)
add(
    "moe_skewed_hot2_4",
    "moe.py",
    4,
    ["--routing", "skewed", "--hot", "2", "--hot-share", "0.8", "--tokens", "512"],
    straggler(
        2,
        "expert",
        4,
        "moe-combine",
        "80 % of every rank's tokens go to the expert on rank 2: its expert range computes ~13x the others' tokens; the others wait in the combine all-to-all (and its backward)",
        sleep=False,
        purpose_also=MOE_ALSO,
    ),
)
add(
    "moe_skewed_hot0_2",
    "moe.py",
    2,
    ["--routing", "skewed", "--hot", "0", "--hot-share", "0.9", "--tokens", "512"],
    straggler(
        0,
        "expert",
        2,
        "moe-combine",
        "90 % of the tokens go to rank 0's expert",
        sleep=False,
        purpose_also=MOE_ALSO,
    ),
)
add(
    "moe_even_expert_sleep_r3_4",
    "moe.py",
    4,
    ["--routing", "even", *sleep_args(3, "expert")],
    straggler(
        3,
        "expert",
        4,
        "moe-combine",
        "even routing; rank 3 sleeps 60 ms inside expert",
        purpose_also=MOE_ALSO,
    ),
)
add(
    "moe_even_moving_4",
    "moe.py",
    4,
    ["--routing", "even", *sleep_args(0, "dataloader"), "--moving"],
    moving(
        "dataloader",
        "moe-alltoall",
        4,
        "dataloader sleep of 60 ms on rank (step % 4); the others wait in the router's count exchange and the dispatch all-to-all",
        purpose_also=MOE_ALSO,
    ),
)

# --- broadcasts (leader / follower, no DDP) ----------------------------------------------------
add(
    "leader_healthy_4",
    "leader_broadcast.py",
    4,
    [],
    healthy(
        "unknown",
        "rank 0 broadcasts the batch and the parameters, gradients reduced to rank 0; not DDP; nothing planted",
    ),
)
add(
    "leader_dataloader_r0_4",
    "leader_broadcast.py",
    4,
    sleep_args(0, "dataloader"),
    straggler(
        0,
        "dataloader",
        4,
        "unknown",
        "the leader sleeps 60 ms in dataloader: the followers wait in the batch broadcast",
        advice_must=[r"(?i)data ?load"],
    ),
)
add(
    "leader_compute_busy_r2_4",
    "leader_broadcast.py",
    4,
    sleep_args(2, "compute", kind="compute"),
    straggler(
        2,
        "compute",
        4,
        "unknown",
        "follower rank 2 computes 60 ms more in compute: rank 0 waits in the reduce, the others in the parameter broadcast behind rank 0",
        sleep=False,
    ),
)
add(
    "leader_uneven_r1_2",
    "leader_broadcast.py",
    2,
    ["--uneven-rank", "1", "--uneven-factor", "6"],
    straggler(1, None, 2, "unknown", "follower rank 1 gets 6x the rows to compute", sleep=False),
)

# --- a side thread doing a collective ---------------------------------------------------------
add(
    "side_healthy_2",
    "side_thread.py",
    2,
    [],
    healthy(
        GA,
        "blocking flat gradient all-reduce on the main thread; a metrics thread all-reduces the loss on its own group; nothing planted",
    ),
)
add(
    "side_heartbeat_sleep_r1_2",
    "side_thread.py",
    2,
    sleep_args(1, "heartbeat"),
    _truth(
        cause="none",
        purpose=GA,
        notes="rank 1's side thread sleeps 60 ms in heartbeat before its metrics all-reduce; rank 0's side thread waits, but the main threads never wait for it: no straggler of the training step",
    ),
)
add(
    "side_checkpoint_r0_4",
    "side_thread.py",
    4,
    sleep_args(0, "save_checkpoint"),
    straggler(
        0,
        "save_checkpoint",
        4,
        GA,
        "rank 0's main thread sleeps 60 ms in save_checkpoint; the others wait in the flat gradient all-reduce",
        advice_must=[r"(?i)checkpoint"],
    ),
)

# --- Shampoo-like optimizer all-gather ---------------------------------------------------------
add(
    "shampoo_healthy_4",
    "shampoo.py",
    4,
    [],
    healthy(
        None,
        "gradient all-reduce, then owned preconditioned updates all-gathered in the optimizer; nothing planted",
    ),
)
add(
    "shampoo_precond_busy_r1_4",
    "shampoo.py",
    4,
    sleep_args(1, "precondition", kind="compute"),
    straggler(
        1,
        "precondition",
        4,
        OPT,
        "rank 1 computes 60 ms more inside precondition: the others wait in the optimizer's all-gather",
        sleep=False,
    ),
)
add(
    "shampoo_precond_sleep_r0_2",
    "shampoo.py",
    2,
    sleep_args(0, "precondition"),
    straggler(
        0,
        "precondition",
        2,
        OPT,
        "rank 0 sleeps 60 ms inside precondition: rank 1 waits in the optimizer's all-gather",
    ),
)

SCENARIOS: list[dict[str, Any]] = S
