"""The library entry points: :func:`load` a trace (or a run) and :func:`analyze` it.

    >>> import traceoverlap
    >>> result = traceoverlap.analyze("fixtures/workloads/bucketed")
    >>> result.steps[["rank", "step", "overlap_ratio", "exposed_comm_ns"]]

Flow: file -> reader -> Timeline -> classify -> steps -> metrics (-> reporters, in the CLI).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .classify import Rules, classify
from .errors import TraceFormatError, UsageError
from .metrics import Thresholds, compute_step_metrics, step_sets, summarize
from .model import Timeline, concat_timelines
from .steps import StepTable, assign_steps

TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".nsys-rep")

PathLike = str | Path


def _is_trace_name(p: Path) -> bool:
    name = p.name.lower()
    return any(name.endswith(s) for s in TRACE_SUFFIXES)


def expand_paths(paths: PathLike | Sequence[PathLike]) -> list[Path]:
    """Files to read: each file as given; each folder's trace files (sorted, not recursive)."""
    items = [paths] if isinstance(paths, str | Path) else list(paths)
    if not items:
        raise UsageError("no input: give a trace file, several files, or a folder of rank traces")
    out: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.is_file() and _is_trace_name(q))
            # x.nsys-rep next to its own export x.sqlite is the same run: read the export only
            exported = {q.name[: -len(".sqlite")] for q in found if q.name.endswith(".sqlite")}
            found = [
                q
                for q in found
                if not (q.name.endswith(".nsys-rep") and q.name[: -len(".nsys-rep")] in exported)
            ]
            if not found:
                raise TraceFormatError(
                    p, "folder holds no trace files", f"expected {', '.join(TRACE_SUFFIXES)} files"
                )
            out.extend(found)
        elif p.exists() or str(item) == "-":  # "-": standard input (readers/__init__.py)
            out.append(p)
        else:
            raise TraceFormatError(p, "no such file or folder", "check the path")
    return out


def load(
    paths: PathLike | Sequence[PathLike], rules: Rules | None = None, jobs: int | None = None
) -> Timeline:
    """Read one trace, several, or a folder of rank traces into one classified Timeline."""
    from .loading import rank_notes, read_files

    files = expand_paths(paths)
    timelines = read_files(files, jobs)  # parallel processes for several files (issue 6)
    timeline = _merge_ranks(timelines)
    missing = rank_notes(timeline)
    if missing and timeline.traces:
        first = timeline.traces[0].with_notes(*missing)
        timeline = Timeline(timeline.events, (first,) + timeline.traces[1:])
    return classify(timeline, rules)


#: Where a rank number was only guessed (no metadata said it): such ranks may be renumbered.
GUESSED_RANK_SOURCES = frozenset({"default", "process-order"})


def _renumber(tl: Timeline, mapping: dict[int, int]) -> Timeline:
    ev = tl.events.copy()
    old = ev["rank"].to_numpy()
    new = old.copy()
    for a, b in mapping.items():
        new[old == a] = b
    ev["rank"] = new.astype(old.dtype)
    traces = tuple(
        replace(
            t,
            rank=mapping[t.rank],
            notes=t.notes
            + (
                f"no rank recorded in {t.path}; numbered rank {mapping[t.rank]} in file order "
                f"(rank {t.rank} was already taken)",
            ),
        )
        if t.rank in mapping
        else t
        for t in tl.traces
    )
    return Timeline(ev, traces)


def _merge_ranks(timelines: Sequence[Timeline]) -> Timeline:
    """Concatenate per-file timelines (in file order).

    A rank claimed twice: when the later claim was only guessed (no rank in the file's metadata),
    it gets the next free rank number, with a note; when both files say so, the first is kept and
    the duplicate is named in a note.
    """
    seen: dict[int, str] = {}
    kept: list[Timeline] = []
    dropped_notes: list[str] = []
    for tl in timelines:
        taken = set(seen) | {t.rank for t in tl.traces}
        mapping: dict[int, int] = {}
        for t in tl.traces:
            if t.rank in seen and t.rank_source in GUESSED_RANK_SOURCES:
                free = next(r for r in range(len(taken) + 1) if r not in taken)
                mapping[t.rank] = free
                taken.add(free)
        if mapping:
            tl = _renumber(tl, mapping)
        clash = [t for t in tl.traces if t.rank in seen]
        if clash:
            for t in clash:
                dropped_notes.append(
                    f"rank {t.rank} appears twice ({seen[t.rank]} and {t.path}); kept the first"
                )
            keep = [t.rank for t in tl.traces if t.rank not in seen]
            if not keep:
                continue
            tl = tl.select_ranks(keep)
        for t in tl.traces:
            seen[t.rank] = t.path
        kept.append(tl)
    merged = concat_timelines(kept)
    if dropped_notes and merged.traces:
        first = merged.traces[0].with_notes(*dropped_notes)
        merged = Timeline(merged.events, (first,) + merged.traces[1:])
    return merged


@dataclass(frozen=True)
class Analysis:
    """Everything one analysis produced. Reporters only format this.

    ``timeline``: the classified Timeline; its events also carry ``kind`` and ``step_index``
    (the row of ``windows`` each event belongs to, -1 for none).
    ``steps``: one row per (rank, step), columns in :data:`traceoverlap.metrics.STEP_COLUMNS`.
    ``summary``: ``{"run": {...}, "ranks": {rank: {...}}}`` (see :func:`metrics.summarize`).
    ``notes``: caveats a reader of the report must know (rank guessed, launches missing...).
    """

    timeline: Timeline
    step_table: StepTable
    steps: pd.DataFrame
    summary: dict[str, Any]
    notes: tuple[str, ...]
    thresholds: Thresholds = field(default_factory=Thresholds)
    rules: Rules = field(default_factory=Rules)
    step_regex: str | None = None
    collectives: Any = None

    @property
    def windows(self) -> pd.DataFrame:
        return self.step_table.windows

    @property
    def unassigned(self) -> dict[int, int]:
        """rank -> GPU activities whose launch was not found (not placed in any step)."""
        return dict(self.step_table.no_launch)

    def step_sets(self, rank: int, step: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Disjoint interval sets (compute, comm, memory, busy, overlap, exposed) of one step."""
        w = self.windows
        row = w[(w["rank"] == rank) & (w["step"].astype(str) == str(step))]
        if row.empty:
            raise UsageError(f"no step {step} on rank {rank}")
        return step_sets(self.timeline, self.step_table, int(row["step_index"].iloc[0]))


def analyze(
    source: PathLike | Sequence[PathLike] | Timeline,
    *,
    step_regex: str | None = None,
    steps: tuple[int, int] | str | None = None,
    ranks: Iterable[int] | None = None,
    rules: Rules | None = None,
    comm_patterns: Iterable[str] = (),
    thresholds: Thresholds | None = None,
    jobs: int | None = None,
) -> Analysis:
    """Analyze a trace, several rank traces, a folder, or a Timeline; see :class:`Analysis`."""
    from .steps import parse_step_range

    rules = (rules or Rules()).with_comm_patterns(comm_patterns)
    if isinstance(source, Timeline):
        timeline = classify(source, rules)
    else:
        timeline = load(source, rules=rules, jobs=jobs)
    if ranks is not None:
        wanted = sorted(set(ranks))
        missing = [r for r in wanted if r not in timeline.ranks]
        if missing:
            raise UsageError(
                f"--rank {missing}: not in the input (ranks present: {timeline.ranks})"
            )
        timeline = timeline.select_ranks(wanted)
    step_range = parse_step_range(steps) if isinstance(steps, str) else steps
    table = assign_steps(timeline, step_regex=step_regex, step_range=step_range)
    # the event table was built by classify() for this call alone: adding the column in place
    # avoids copying a large table just to tag rows with their step
    timeline.events["step_index"] = table.event_step
    th = thresholds or Thresholds()
    df = compute_step_metrics(timeline, table, th)
    notes = _notes(timeline, table)
    if df.empty:
        raise UsageError(
            "no steps to analyze"
            + (f" in --steps {steps}" if steps else "")
            + (": " + "; ".join(notes) if notes else "")
        )
    summary = {
        "run": summarize(df),
        "ranks": {int(r): summarize(g) for r, g in df.groupby("rank", sort=True)},
    }
    result = Analysis(timeline, table, df, summary, notes, th, rules, step_regex)
    # --- collectives across ranks (issue 6): only a run of two or more ranks has any to match
    if len(timeline.ranks) >= 2:
        from dataclasses import replace as _replace

        from .collectives import add_wait_transfer, match_collectives

        coll = match_collectives(result)
        result = _replace(
            result,
            steps=add_wait_transfer(df, table.windows, coll),
            notes=tuple(dict.fromkeys(notes + coll.notes)),
            collectives=coll,
        )
    return result


def _notes(timeline: Timeline, table: StepTable) -> tuple[str, ...]:
    notes: list[str] = []
    for t in timeline.traces:
        notes.extend(f"rank {t.rank}: {n}" if not n.startswith("rank ") else n for n in t.notes)
    notes.extend(table.notes)
    for rank, n in sorted(table.no_launch.items()):
        notes.append(
            f"rank {rank}: {n} GPU activities have no launch record in the trace and are in no step"
        )
    return tuple(dict.fromkeys(notes))
