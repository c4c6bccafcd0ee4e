"""Every output table, declared once: its columns' names, types, units and meanings.

The JSON, CSV, Markdown, text and HTML reporters, the summaries, ``--fail-if``, ``compare`` and
the docs table (``docs/schema.md``, written by ``python -m traceoverlap.core.schema --markdown``) take
their column lists from here; ``tests/test_schema.py`` fails when the docs and this file
disagree. The meanings are docs/metrics.md's and docs/diagnosis.md's words, in short.

Adding a column to the step table: declare it below (a :class:`Column` and its place in
:data:`STEPS`) and compute it under ``NEW.name``: in ``metrics.step_parts`` when one unit's
windows give it, in ``analysis._step_table`` when it needs every rank. The JSON, the CSV, the
docs table, the summaries and ``--fail-if`` (``stats=True``, the default of a ``_ns`` column)
follow; the text and Markdown tables show the columns ``reporters/_format.STEP_TABLE_COLUMNS``
names.

Code that needs one column by name uses its constant (``OVERLAP_RATIO.name``), never the
string: a search for a column name finds its declaration here.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from .vocab import Cause

# --- what a column holds ------------------------------------------------------------------------

#: JSON types: ``int``, ``float``, ``str``, ``bool``, ``label`` (an int, or a str such as
#: ``"4#2"`` or ``"all"``), ``list[int]``, ``list[float]`` (null entries where undefined),
#: ``list[str]``, ``object`` (a JSON object).
INT, FLOAT, STR, BOOL, LABEL = "int", "float", "str", "bool", "label"
INT_LIST, FLOAT_LIST, STR_LIST, OBJECT = "list[int]", "list[float]", "list[str]", "object"

#: Units: integer nanoseconds, a ratio in 0-1, a factor (>= 1 for a speedup), bytes, GB/s, a
#: count, a rank, or none (``""``).
NS, RATIO, FACTOR, BYTES, GBPS, COUNT, RANK_UNIT, NONE = (
    "ns",
    "ratio",
    "x",
    "bytes",
    "GB/s",
    "count",
    "rank",
    "",
)


@dataclass(frozen=True)
class Column:
    """One column of an output table. ``nullable``: may be null (JSON ``null``, CSV empty);
    ``stats``: summaries give its mean / median / p90 / min / max (and, for ns, its total), and
    ``--fail-if`` accepts it."""

    name: str
    type: str
    unit: str
    meaning: str
    nullable: bool = False
    stats: bool = False


@dataclass(frozen=True)
class Table:
    """An output table: ``where`` it appears (JSON key, CSV...) and its columns in output order."""

    name: str
    where: str
    columns: tuple[Column, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


def _ns(name: str, meaning: str, *, stats: bool = True, nullable: bool = False) -> Column:
    return Column(name, INT, NS, meaning, nullable, stats)


def _ratio(name: str, meaning: str, unit: str = RATIO) -> Column:
    return Column(name, FLOAT, unit, meaning, nullable=True, stats=True)


# --- the step table: one row per (rank, device, step) -------------------------------------------
# C, M, Y: the unions of compute, communication and memory activity in the step window W.

RANK = Column("rank", INT, RANK_UNIT, "the rank")
DEVICE = Column("device", INT, NONE, "the GPU of the rank's process; null on CPU ranks", True)
PID = Column("pid", INT, NONE, "the process id, when the trace has it", True)
STEP = Column("step", LABEL, NONE, "the marker's number (4, '4#2' when repeated), or 'all'")
STEP_NS = _ns("step_ns", "|W|: the step window, [first start, last end) of its work")
COMPUTE_NS = _ns("compute_ns", "|C|: compute")
COMM_NS = _ns("comm_ns", "|M|: communication")
MEMORY_NS = _ns("memory_ns", "|Y|: memcpy / memset")
OVERLAP_NS = _ns("overlap_ns", "|C ∩ M|: communication hidden behind compute")
EXPOSED_COMM_NS = _ns("exposed_comm_ns", "|M − C|: communication nothing hid")
IDLE_NS = _ns("idle_ns", "nothing at all ran on the device")
OTHER_STEPS_NS = _ns("other_steps_ns", "only other steps' work ran (overlapping steps)")
COMPUTE_ONLY_NS = _ns("compute_only_ns", "|C − M|: compute with no communication beside it")
MEMORY_ONLY_NS = _ns("memory_only_ns", "|Y − C − M|: memcpy / memset alone")
EXPOSED_WAIT_NS = _ns("exposed_wait_ns", "exposed comm waiting for a later rank")
EXPOSED_TRANSFER_NS = _ns(
    "exposed_transfer_ns", "exposed comm in the transfer part of a matched collective"
)
EXPOSED_UNMATCHED_NS = _ns(
    "exposed_unmatched_ns",
    "the rest of the exposed comm: wait vs transfer unknown (no peers or pair in the trace)",
)
EXPOSED_TAIL_NS = _ns("exposed_tail_ns", "exposed: no compute of the step starts after it")
EXPOSED_DEPENDENCY_NS = _ns("exposed_dependency_ns", "exposed: the next compute waited for it")
EXPOSED_HOST_NS = _ns("exposed_host_ns", "exposed: the host had not launched the next compute")
OVERLAP_RATIO = _ratio("overlap_ratio", "overlap / comm; null without comm")
IDEAL_NS = _ns("ideal_ns", "step − exposed + max(0, |M| − |C|): every hideable ns hidden")
POTENTIAL_SPEEDUP = _ratio("potential_speedup", "step / ideal", FACTOR)
EXPOSED_COMM_RATIO = _ratio("exposed_comm_ratio", "exposed comm / step")
IDLE_RATIO = _ratio("idle_ratio", "idle / step")
ITERATION_NS = Column(
    "iteration_ns",
    INT,
    NS,
    "the marker's start to the next marker's start; null for the last",
    True,
)
BOTTLENECK = Column("bottleneck", STR, NONE, "the verdict (peer-wait-bound ... compute-bound)")
REASON = Column("reason", STR, NONE, "the numbers that decided the verdict, in words")
WAITED_FOR_RANK = Column(
    "waited_for_rank", INT, RANK_UNIT, "the rank whose lateness cost the most waiting", True
)
WAIT_KNOWN = Column("wait_known", BOOL, NONE, "false when waiting could not be told from transfer")
START_NS = _ns("start_ns", "the window's start, on the rank's own clock", stats=False)
END_NS = _ns("end_ns", "the window's end, on the rank's own clock", stats=False)

STEPS = Table(
    "steps",
    "JSON `steps`, the CSV rows",
    (
        RANK,
        DEVICE,
        PID,
        STEP,
        STEP_NS,
        COMPUTE_NS,
        COMM_NS,
        MEMORY_NS,
        OVERLAP_NS,
        EXPOSED_COMM_NS,
        IDLE_NS,
        OTHER_STEPS_NS,
        COMPUTE_ONLY_NS,
        MEMORY_ONLY_NS,
        EXPOSED_WAIT_NS,
        EXPOSED_TRANSFER_NS,
        EXPOSED_UNMATCHED_NS,
        EXPOSED_TAIL_NS,
        EXPOSED_DEPENDENCY_NS,
        EXPOSED_HOST_NS,
        OVERLAP_RATIO,
        IDEAL_NS,
        POTENTIAL_SPEEDUP,
        EXPOSED_COMM_RATIO,
        IDLE_RATIO,
        ITERATION_NS,
        BOTTLENECK,
        REASON,
        WAITED_FOR_RANK,
        WAIT_KNOWN,
        START_NS,
        END_NS,
    ),
)

#: The exposed ns of a step (or a collective) per cause, in docs/diagnosis.md §3 order.
EXPOSED_BY_CAUSE: dict[str, Column] = {
    Cause.WAIT: EXPOSED_WAIT_NS,
    Cause.TAIL: EXPOSED_TAIL_NS,
    Cause.DEPENDENCY: EXPOSED_DEPENDENCY_NS,
    Cause.HOST: EXPOSED_HOST_NS,
}
#: The disjoint parts a step splits into (diagnosis.md §1); they sum to ``step_ns``.
PARTS = (
    COMPUTE_ONLY_NS,
    OVERLAP_NS,
    EXPOSED_WAIT_NS,
    EXPOSED_TRANSFER_NS,
    EXPOSED_UNMATCHED_NS,
    MEMORY_ONLY_NS,
    OTHER_STEPS_NS,
    IDLE_NS,
)

# --- summaries: the run, and each rank ----------------------------------------------------------
# Their metrics are the step columns with ``stats``: the step, its unions and the ideal step
# first (the order schema_version 2 published), then the other times in step order; then the
# ratios in step order.
_SUMMARY_FIRST = (
    STEP_NS,
    COMPUTE_NS,
    COMM_NS,
    MEMORY_NS,
    OVERLAP_NS,
    EXPOSED_COMM_NS,
    IDLE_NS,
    OTHER_STEPS_NS,
    IDEAL_NS,
)
#: Time metrics of the summaries (statistics and totals) and of ``--fail-if`` (medians).
NS_METRICS: tuple[str, ...] = tuple(c.name for c in _SUMMARY_FIRST) + tuple(
    c.name for c in STEPS.columns if c.stats and c.unit == NS and c not in _SUMMARY_FIRST
)
#: Ratio metrics (None when the denominator is 0): statistics over steps, and run aggregates
#: (total over total) that ``--fail-if`` checks.
RATIO_METRICS: tuple[str, ...] = tuple(
    c.name for c in STEPS.columns if c.stats and c.unit in (RATIO, FACTOR)
)

STATS = Table(
    "stats",
    "`summary.*.metrics.<metric>`: one metric over the steps (null when no step has it)",
    tuple(
        Column(s, FLOAT, "as the metric", f"{s} over the steps", nullable=True)
        for s in ("mean", "median", "p90", "min", "max")
    ),
)
SUMMARY = Table(
    "summary",
    "JSON `summary.run` and `summary.ranks.<rank>` (`<rank>:<device>` when a process drove "
    "several GPUs)",
    (
        Column("n_steps", INT, COUNT, "steps summarised"),
        Column(
            "metrics", OBJECT, NONE, f"per metric ({', '.join(NS_METRICS + RATIO_METRICS)}): stats"
        ),
        Column("totals", OBJECT, NS, "per time metric: the sum over steps"),
        replace(OVERLAP_RATIO, meaning="total overlap / total comm"),
        replace(EXPOSED_COMM_RATIO, meaning="total exposed comm / total step"),
        replace(IDLE_RATIO, meaning="total idle / total step"),
        replace(POTENTIAL_SPEEDUP, meaning="total step / total ideal"),
        Column("bottlenecks", OBJECT, COUNT, "per verdict: how many steps got it"),
        Column("dominant_bottleneck", STR, NONE, "the most frequent verdict", True),
        Column("worst_step", OBJECT, NONE, "the most exposed step: step_ref", True),
        Column("slowest_step", OBJECT, NONE, "the slowest step: step_ref", True),
    ),
)
STEP_REF = Table(
    "step_ref",
    "`summary.*.worst_step` and `slowest_step`: one step singled out",
    (RANK, DEVICE, STEP, STEP_NS, EXPOSED_COMM_NS, BOTTLENECK, REASON),
)
FINDINGS = Table(
    "findings",
    "JSON `findings`: what to try, most important first",
    (
        Column(
            "kind",
            STR,
            NONE,
            "same_stream, wait, tail, dependency, host, transfer-bound, memory-bound or idle-bound",
        ),
        Column("title", STR, NONE, "what happened, with the numbers"),
        Column("advice", STR, NONE, "what to try"),
        Column("family", STR, NONE, "the collective family carrying the time", True),
        Column("exposed_ns", INT, NS, "the exposed comm (idle / memory time) behind it"),
        Column(
            "share_ratio",
            FLOAT,
            RATIO,
            "of all exposed comm (all step time for idle / memory)",
            True,
        ),
        Column("collectives", STR_LIST, NONE, "the collectives concerned, most exposed first"),
        Column("evidence", OBJECT, NONE, "the numbers a reader can check"),
        Column("purpose", STR, NONE, "what the collectives are for (diagnosis.md §10)", True),
    ),
)

# --- collectives, stragglers, blame -------------------------------------------------------------

EXPOSED_NS = _ns("exposed_ns", "exposed ns (summed over members for an instance)", stats=False)
WAIT_NS = _ns("wait_ns", "the wait part: duration − transfer (summed over members)", stats=False)
COLLECTIVES = Table(
    "collectives",
    "JSON `collectives`: every collective instance, matched across ranks or not",
    (
        Column("instance", INT, NONE, "id, numbered by first start"),
        Column("name", STR, NONE, "collective name"),
        Column(
            "family",
            STR,
            NONE,
            "advice family (AllReduce, AllGather/ReduceScatter, SendRecv, AllToAll, Other)",
        ),
        Column("process_group", STR, NONE, "group name as the trace gave it", True),
        Column("seq", INT, NONE, "the trace's sequence number", True),
        Column("bytes", INT, BYTES, "message size", True),
        Column(
            "group_ranks",
            INT,
            COUNT,
            "the n of busbw: ranks it matched on, else the world size",
            True,
        ),
        Column("algbw_gbps", FLOAT, GBPS, "bytes / transfer_ns (1 byte per ns is 1 GB/s)", True),
        Column(
            "busbw_gbps", FLOAT, GBPS, "algbw × NCCL's factor for the collective over n ranks", True
        ),
        Column("purpose", STR, NONE, "what it is for (DDP bucket, FSDP all-gather...) or unknown"),
        replace(STEP, meaning="step of its first piece on the first rank"),
        Column("ranks", INT_LIST, NONE, "the ranks given that ran it"),
        Column("matched", BOOL, NONE, "matched across ranks and consistent in time"),
        _ns("transfer_ns", "shortest duration across members", stats=False),
        WAIT_NS,
        Column("last_rank", INT, RANK_UNIT, "last arrival; null when unknown or tied", True),
        EXPOSED_NS,
        Column("per_rank", OBJECT, NONE, "per rank (keyed as in summaries): collective_per_rank"),
    ),
)
COLLECTIVE_PER_RANK = Table(
    "collective_per_rank",
    "JSON `collectives[].per_rank.<rank>`: the instance on one rank",
    (
        replace(START_NS, meaning="its start, on the rank's own clock"),
        _ns("dur_ns", "its duration", stats=False),
        replace(WAIT_NS, meaning="its wait part [start, start + wait_ns)"),
        replace(EXPOSED_NS, meaning="its exposed ns"),
        *(
            replace(EXPOSED_BY_CAUSE[cause], meaning=f"its exposed ns, cause {cause}", stats=False)
            for cause in EXPOSED_BY_CAUSE
        ),
        replace(
            EXPOSED_UNMATCHED_NS,
            meaning="its exposed ns with no known wait / transfer split (diagnosis.md §12)",
            stats=False,
        ),
        Column(
            "unmatched_why",
            STR,
            NONE,
            "why its split is unknown (no peer, unpaired, group unknown...); null when known",
            True,
        ),
        Column("same_stream", BOOL, NONE, "it ran on a compute stream"),
        _ns(
            "queued_ns", "launch to start; null without a launch record", stats=False, nullable=True
        ),
        _ns(
            "behind_comm_ns",
            "held behind earlier comm on its lane; null without a launch record",
            stats=False,
            nullable=True,
        ),
        Column("lane", STR, NONE, "its GPU stream or host thread"),
    ),
)
ROOT_WAITED_FOR_NS = _ns(
    "root_waited_for_ns", "the exposed wait whose blame chain ends at it", stats=False
)
STRAGGLERS = Table(
    "stragglers",
    "JSON `stragglers.ranks`: per rank, how often it arrived last",
    (
        RANK,
        Column("instances", INT, COUNT, "matched instances it ran"),
        Column("last_count", INT, COUNT, "how often it arrived last"),
        Column("last_ratio", FLOAT, RATIO, "last_count / instances"),
        _ns("waited_for_ns", "how long the others waited for it", stats=False),
        replace(WAIT_NS, meaning="how long it waited itself"),
        _ns("exposed_waited_for_ns", "the exposed wait credited to it", stats=False),
        ROOT_WAITED_FOR_NS,
    ),
)
STEP_SKEW = Table(
    "step_skew",
    "JSON `stragglers.steps`: per step, the slowest rank and the skew",
    (
        STEP,
        Column("n_ranks", INT, COUNT, "ranks that have the step"),
        Column("slowest_rank", INT, RANK_UNIT, "the rank with the longest step"),
        Column("fastest_rank", INT, RANK_UNIT, "the rank with the shortest step"),
        _ns("max_step_ns", "the longest step", stats=False),
        _ns("min_step_ns", "the shortest step", stats=False),
        _ns("skew_ns", "max − min", stats=False),
    ),
)
BLAME = Table(
    "blame",
    "JSON `blame`: who waited for whom (docs/job-model.md)",
    (
        Column("window", INT, NONE, "the waiting unit's global window"),
        replace(RANK, meaning="the waiting rank"),
        replace(STEP, meaning="the waiting step"),
        replace(WAITED_FOR_RANK, meaning="the rank credited (first link)", nullable=False),
        replace(EXPOSED_WAIT_NS, meaning="the credit behind it", stats=False),
        Column("chain", INT_LIST, NONE, "ranks from the credited rank to the root"),
        Column("root_rank", INT, RANK_UNIT, "last rank of the chain"),
        _ns("lateness_ns", "the root's arrival minus the first arrival", stats=False),
        Column("cause", STR, NONE, "the root's range that ran longest beyond its peer's", True),
        Column("cause_ns", INT, NS, "that excess, at most lateness_ns", True),
        Column("explained_ratio", FLOAT, RATIO, "cause_ns / lateness_ns", True),
        Column(
            "late_at_start_ns",
            INT,
            NS,
            "the root's step start minus its early peer's, when the trace holds no earlier "
            "collective of the two (the lateness began before the capture); null otherwise",
            True,
        ),
    ),
)

# --- compare -------------------------------------------------------------------------------------

COMPARE_METRICS = Table(
    "compare_metrics",
    "`compare` JSON `metrics`: medians over every (rank, step) of each run; the overlap ratio "
    "is the run's aggregate (total overlap / total comm), as `analyze` gives it",
    (
        Column("metric", STR, NONE, "the step column"),
        Column("label", STR, NONE, "the metric in words"),
        Column("baseline", FLOAT, "as the metric", "baseline median (a ratio: aggregate)", True),
        Column("candidate", FLOAT, "as the metric", "candidate median (a ratio: aggregate)", True),
        Column("delta", FLOAT, "as the metric", "candidate − baseline", True),
        Column("change_ratio", FLOAT, RATIO, "delta / baseline", True),
    ),
)
COMPARE_COLLECTIVES = Table(
    "compare_collectives",
    "`compare` JSON `collectives`: the collectives whose exposure changed most",
    (
        Column(
            "collective",
            STR,
            NONE,
            "its key and order within the step (all_reduce #3), or a family as a whole",
        ),
        Column("name", STR, NONE, "the collective name (the family when paired as a whole)"),
        Column("position", INT, NONE, "its order among the collectives of its key in a step"),
        Column("baseline_exposed_ns", FLOAT, NS, "baseline median exposed ns over (rank, step)"),
        Column("candidate_exposed_ns", FLOAT, NS, "candidate median exposed ns"),
        Column("delta_ns", FLOAT, NS, "candidate − baseline"),
        Column("baseline_count", INT, COUNT, "(rank, step)s of the baseline that have it"),
        Column("candidate_count", INT, COUNT, "(rank, step)s of the candidate that have it"),
        Column(
            "paired_by",
            STR,
            NONE,
            "order (key and order within the step) or family (the runs' collectives differ)",
        ),
    ),
)

# --- what-if (docs/whatif.md) ---------------------------------------------------------------------

REPLAY = Table(
    "whatif_replay",
    "`whatif` JSON `replay`: the identity replay against the trace",
    (
        Column("median_error_ratio", FLOAT, RATIO, "median over steps of the step error", True),
        Column("max_error_ratio", FLOAT, RATIO, "the largest step error", True),
        Column("rounds", INT, COUNT, "replay rounds until the waits settled"),
        Column("steps", OBJECT, NONE, "per step: whatif_replay_steps"),
        Column(
            "slack_ratio",
            FLOAT,
            RATIO,
            "median over steps of the share of the step that is slack (delays the graph does "
            "not explain)",
            True,
        ),
    ),
)
REPLAY_STEPS = Table(
    "whatif_replay_steps",
    "`whatif` JSON `replay.steps`: one step, observed and replayed",
    (
        replace(STEP, meaning="the step"),
        Column("observed_ns", FLOAT, NS, "the step in the trace (mean over ranks)", True),
        Column(
            "replayed_ns", FLOAT, NS, "the step the identity replay gives (mean over ranks)", True
        ),
        Column("error_ratio", FLOAT, RATIO, "|replayed − observed| / observed", True),
        Column(
            "slack_ns",
            FLOAT,
            NS,
            "how much of the replayed step is slack: the replay less the replay with every "
            "slack zeroed (mean over ranks)",
            True,
        ),
    ),
)
SCENARIOS = Table(
    "whatif_scenarios",
    "`whatif` JSON `scenarios` and `fix_rank`: one counterfactual",
    (
        Column("name", STR, NONE, "replay, no-straggler, fix-rank:R, hide:FAMILY, comm-speed:F..."),
        replace(
            STEP_NS,
            type=FLOAT,
            meaning="predicted step: mean over ranks, median over steps",
            nullable=True,
            stats=False,
        ),
        Column(
            "speedup",
            FLOAT,
            FACTOR,
            "the replay's step measured as this one (baseline_ns) / this step",
            True,
        ),
        Column("changed", STR, NONE, "what the scenario changed"),
        Column("ranks", INT_LIST, NONE, "the ranks involved"),
        Column("collectives", STR_LIST, NONE, "the collectives involved"),
        Column("steps_ns", FLOAT_LIST, NS, "the predicted step of each step"),
        Column("note", STR, NONE, "a caveat (not a prediction there...)", True),
        _ns(
            "contention_ns",
            "more compute beside communication than the trace (0: none)",
            stats=False,
        ),
        Column(
            "slack",
            STR,
            NONE,
            "what it does with the observed slack: kept, peers (the peers' median), "
            "zeroed-host or zeroed",
        ),
        Column(
            "baseline_ns",
            FLOAT,
            NS,
            "the replay's step with every rank's first step measured from the earlier of its "
            "first starts in the replay and here (a rank started with its peers: from there "
            "in both): what speedup divides",
            True,
        ),
    ),
)
OVERLAP_TAX = Table(
    "whatif_overlap_tax",
    "`whatif` JSON `overlap_tax`: compute slowed down beside communication (§4)",
    (
        _ns("total_ns", "the tax over the run", stats=False),
        replace(OVERLAP_NS, meaning="the overlap it is part of", stats=False),
        _ns("unmeasured_ns", "compute under communication with no alone instance", stats=False),
        _ns(
            "estimated_ns",
            "the part of total_ns estimated there (excess over the op's median instance)",
            stats=False,
        ),
        Column("by_family_ns", OBJECT, NS, "the tax per collective family"),
        Column("steps_ns", FLOAT_LIST, NS, "the tax of each step (mean over ranks)"),
        Column("rank_steps", OBJECT, NONE, "per (rank, step): whatif_tax_rank_steps"),
        Column(
            "basis",
            OBJECT,
            NONE,
            "what the tax stands on: kind (measured: the run also ran steps without "
            "communication; estimated; none) and counts of instances (under, compared, alone, "
            "estimated, quiet_steps) and net_ns (the compared instances less their median alone, "
            "signed)",
        ),
        Column("label", STR, NONE, "basis in words: what every output prints beside the tax"),
    ),
)
TAX_RANK_STEPS = Table(
    "whatif_tax_rank_steps",
    "`whatif` JSON `overlap_tax.rank_steps`: the tax of one (rank, step)",
    (
        RANK,
        STEP,
        _ns("overlap_tax_ns", "the tax (time inside overlap_ns)", stats=False),
        _ns("compute_under_comm_ns", "compute that ran under communication", stats=False),
    ),
)

TABLES = (
    STEPS,
    SUMMARY,
    STATS,
    STEP_REF,
    FINDINGS,
    COLLECTIVES,
    COLLECTIVE_PER_RANK,
    STRAGGLERS,
    STEP_SKEW,
    BLAME,
    COMPARE_METRICS,
    COMPARE_COLLECTIVES,
    REPLAY,
    REPLAY_STEPS,
    SCENARIOS,
    OVERLAP_TAX,
    TAX_RANK_STEPS,
)


# --- the Python API's DataFrames ----------------------------------------------------------------

#: Columns of the Python API's DataFrames that no output table declares but that share their
#: meaning (and so their type) with a declared one: the internal columns kept beside the
#: output ones (``per_rank.waited_for_rank``, ``windows.device``...).
SHARED_COLUMNS: dict[str, Column] = {
    c.name: c
    for c in (
        RANK,
        DEVICE,
        PID,
        STEP,
        WAITED_FOR_RANK,
        START_NS,
        END_NS,
        Column("src_rank", INT, RANK_UNIT, "a point-to-point instance's sender", True),
        Column("dst_rank", INT, RANK_UNIT, "a point-to-point instance's receiver", True),
    )
}


def pandas_dtype(column: Column) -> str:
    """The pandas dtype of ``column`` in a DataFrame of the Python API: null is ``<NA>``, never
    NaN, never a sentinel, never an ``object`` column (docs/python-api.md "Column dtypes").

    ``int``: ``int64``, ``Int64`` when nullable; ``float``: ``Float64``; ``bool``: ``bool``,
    ``boolean`` when nullable; ``str``: pandas' ``str``, ``string`` when nullable; ``label``
    (a step: 4, ``"4#2"``, ``"all"``): ``string``. Lists and JSON objects stay ``object``."""
    if column.type == INT:
        return "Int64" if column.nullable else "int64"
    if column.type == FLOAT:
        return "Float64"
    if column.type == BOOL:
        return "boolean" if column.nullable else "bool"
    if column.type == LABEL:
        return "string"
    if column.type == STR:
        return "string" if column.nullable else "str"
    return "object"


def conform(df: pd.DataFrame, table: Table) -> pd.DataFrame:
    """``df`` with every column ``table`` (or :data:`SHARED_COLUMNS`) declares cast to its
    :func:`pandas_dtype`: NaN and None become ``<NA>``; negative values of a nullable ``_ns``
    column (the -1 "unknown" of the analysis) too. Other columns are kept as they are."""
    declared = {c.name: c for c in table.columns}
    # an empty frame (a single rank's stragglers, skew, blame): each column cast is an empty
    # array of its dtype, and one new frame costs less than assigning them one by one
    empty = len(df) == 0 and df.columns.is_unique
    out: dict[Any, Any] = {}
    for name, dtype in zip(df.columns, df.dtypes.tolist(), strict=True):
        col = declared.get(str(name), SHARED_COLUMNS.get(str(name)))
        if col is None:
            continue
        want = pandas_dtype(col)
        ns = col.nullable and col.type == INT and col.unit == NS
        if col.type != LABEL and not ns and str(dtype) == want:
            continue  # already as declared: the column is kept, not looked up
        if empty:
            out[name] = _empty_array(want)
            continue
        s = df[name]
        if col.type == LABEL:
            s = _label_texts(s) if s.dtype == object else s.astype(str)
        if ns:
            s = _unknown_as_na(s)
        if str(s.dtype) != want:
            s = _as_nullable_int(s) if want == "Int64" else s.astype(want)
        out[name] = s
    if empty and out:
        return pd.DataFrame(
            {c: out[c] if c in out else df[c] for c in df.columns},
            index=df.index,
            columns=df.columns,
        )
    return df.assign(**out) if out else df


def _empty_array(dtype: str) -> Any:
    """An empty column of ``dtype`` (a :func:`pandas_dtype`), as ``astype(dtype)`` of an empty
    column makes it: numpy for numpy dtypes, else pandas' extension array."""
    if dtype in ("int64", "bool", "object"):
        return np.empty(0, dtype=dtype)
    return pd.array([], dtype=dtype)


def _ints_or_nulls(s: pd.Series) -> tuple[npt.NDArray[np.object_], npt.NDArray[np.bool_]] | None:
    """An ``object`` column's values and null mask when every other value is an integer (as
    pandas infers it: ``int`` or a numpy integer); None otherwise."""
    if s.dtype != object:
        return None
    values = s.to_numpy()
    if pd.api.types.infer_dtype(values, skipna=True) not in ("integer", "empty"):
        return None
    return values, np.asarray(pd.isna(values), dtype=bool)


def _as_nullable_int(s: pd.Series) -> pd.Series:
    """``s.astype("Int64")``; an ``object`` column of integers and nulls (the analysis' rank and
    count columns) cast in numpy, not value by value through pandas' coercion."""
    got = _ints_or_nulls(s)
    if got is None:
        return s.astype("Int64")
    values, null = got
    data = values.copy()
    data[null] = 0
    return pd.Series(
        pd.arrays.IntegerArray(data.astype(np.int64), null), index=s.index, name=s.name
    )


def _label_texts(s: pd.Series) -> pd.Series:
    """``s.map(str, na_action="ignore")`` of an ``object`` step-label column: integers (step
    numbers) turned to texts once per distinct value, nulls kept."""
    got = _ints_or_nulls(s)
    if got is None:
        return s.map(str, na_action="ignore")
    values, null = got
    # one text per distinct integer (equal integers print alike), nulls kept as they are
    codes, distinct = pd.factorize(values)
    texts = np.array([str(v) for v in distinct.tolist()] + [None], dtype=object)
    out = texts[np.asarray(codes, dtype=np.int64)]
    out[null] = values[null]
    return pd.Series(out, index=s.index, name=s.name, dtype=object)


def _unknown_as_na(s: pd.Series) -> pd.Series:
    """``s`` as ``Int64`` with its negative values (and NaN / None) ``<NA>``: an ``int64`` or
    ``Int64`` column masked at once (``astype`` then ``mask`` costs ~1.8 ms a column),
    anything else through pandas."""
    if s.dtype == object:
        s = _as_nullable_int(s)  # an object column of integers: then masked as Int64 below
    if s.dtype == "int64":
        values = s.to_numpy(dtype=np.int64, copy=True)
    elif s.dtype == "Int64":
        values = s.array.to_numpy(dtype=np.int64, na_value=-1)  # <NA> masked again below
    else:
        s = s.astype("Int64")
        return s.mask((s < 0).fillna(False))
    return pd.Series(pd.arrays.IntegerArray(values, values < 0), index=s.index, name=s.name)


def markdown() -> str:
    """The docs table (``docs/schema.md``): every output table, one row per column."""
    out = [
        "# Output tables",
        "",
        "Generated from `traceoverlap/core/schema.py` by `python -m traceoverlap.core.schema --markdown`;",
        "`tests/test_schema.py` fails when this file and the schema disagree. Definitions:",
        "[metrics.md](metrics.md), [diagnosis.md](diagnosis.md); the JSON around them:",
        "[cli.md](cli.md). Times are integer nanoseconds, ratios 0-1 (factors ≥ 1) or null,",
        "never NaN. Summaries give statistics of the step metrics below; `--fail-if` accepts",
        "them: the ratios as run aggregates, the `_ns` metrics as medians over steps.",
    ]
    for t in TABLES:
        out += ["", f"## `{t.name}`", "", t.where + ".", ""]
        out += ["| column | type | unit | meaning |", "|---|---|---|---|"]
        for c in t.columns:
            kind = c.type + (" / null" if c.nullable else "")
            meaning = c.meaning.replace("|", "\\|")
            out.append(f"| `{c.name}` | {kind} | {c.unit} | {meaning} |")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if argv != ["--markdown"]:
        print("usage: python -m traceoverlap.core.schema --markdown", file=sys.stderr)
        return 2
    sys.stdout.write(markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
