"""Name -> kind rules, as data.

The defaults are exactly those of the metrics contract (docs: "Activities and kinds"):

GPU ranks (the rank has at least one kernel / memcpy / memset):
  - comm: a kernel whose name contains ``nccl`` or starts with ``rccl`` / ``hccl`` (any case)
  - memory: memcpy and memset activities
  - compute: every other kernel
  - everything else (sync records, launches, host ops, ranges): not activity (``none``)

CPU-only ranks (e.g. gloo on CPU):
  - comm: events named ``gloo:*`` (the work of gloo's ``pt_gloo_runloop`` threads)
  - compute: ``cpu_op`` events on other threads, except the ops that launch or wait for
    communication (``c10d::*``, ``record_param_comms``, ``nccl:*``, ``gloo:*``)
  - a rank with no ``cpu_op`` at all (a capture of NVTX ranges only: a CPU run under Nsight
    Systems): compute is the phases the program marks (``forward``, ``backward``,
    ``optimizer``: :attr:`Rules.cpu_compute_ranges`), comm the ``gloo:*`` ranges it marks around
    its collectives. When a CPU Nsight Systems rank has none, its notes say that the capture
    shows no communication (rather than none happening).

Users extend the rules with ``--comm-pattern REGEX`` or a TOML config (see :func:`load_config`).
Patterns are Python regexes matched with ``re.search``; they are evaluated once per distinct
name (the name column is categorical), never per event.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .errors import UsageError
from .model import Timeline, TraceInfo

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class Rules:
    """Classification rules. Every field is a tuple of regexes (``re.search``, as written)."""

    gpu_comm: tuple[str, ...] = (r"(?i)nccl", r"(?i)^rccl", r"(?i)^hccl")
    cpu_comm: tuple[str, ...] = (r"^gloo:",)
    cpu_compute_exclude: tuple[str, ...] = (
        r"^c10d::",
        r"^record_param_comms$",
        r"^nccl:",
        r"^gloo:",
    )
    # threads whose ops are communication work, never compute
    cpu_comm_threads: tuple[str, ...] = (r"pt_gloo_runloop",)
    # user patterns added with --comm-pattern: comm on both GPU and CPU ranks
    extra_comm: tuple[str, ...] = field(default=())
    # host ranges that are compute on CPU ranks without any cpu_op (NVTX-only captures: a CPU
    # run under Nsight Systems has no PyTorch profiler ops): the phases the program marks
    cpu_compute_ranges: tuple[str, ...] = (r"^(forward|backward|optimizer)$",)

    def with_comm_patterns(self, patterns: Iterable[str]) -> Rules:
        pats = tuple(patterns)
        for p in pats:
            _compile(p, "--comm-pattern")
        return replace(self, extra_comm=self.extra_comm + pats)


def _compile(pattern: str, what: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"invalid regex {pattern!r} in {what}: {exc}") from None


def _any_match(patterns: Sequence[str], names: pd.Index) -> np.ndarray:
    """Boolean per distinct name: does any pattern match it? (a handful of patterns x distinct names)"""
    out = np.zeros(len(names), dtype=bool)
    strs = [str(n) for n in names]
    for p in patterns:
        rx = _compile(p, "rules")
        out |= np.fromiter((rx.search(s) is not None for s in strs), bool, len(strs))
    return out


def _name_mask(events: pd.DataFrame, column: str, patterns: Sequence[str]) -> np.ndarray:
    cat = events[column].cat
    per_name = _any_match(patterns, cat.categories)
    codes = cat.codes.to_numpy()
    return np.where(codes >= 0, per_name[np.maximum(codes, 0)], False)


def classify(timeline: Timeline, rules: Rules | None = None) -> Timeline:
    """Return a Timeline whose events carry a ``kind`` column (compute / comm / memory / none)."""
    rules = rules or Rules()
    ev = timeline.events
    n = len(ev)
    kind = np.full(n, 3, dtype=np.int8)  # index into KINDS: compute, comm, memory, none
    if n:
        cat = ev["category"].to_numpy(dtype=object)
        is_kernel = cat == "kernel"
        is_mem = (cat == "memcpy") | (cat == "memset")
        on_gpu_rank = np.isin(ev["rank"].to_numpy(), timeline.gpu_ranks())

        gpu_comm = _name_mask(ev, "name", rules.gpu_comm + rules.extra_comm)
        kind[on_gpu_rank & is_kernel] = 0
        kind[on_gpu_rank & is_kernel & gpu_comm] = 1
        kind[on_gpu_rank & is_mem] = 2

        cpu = ~on_gpu_rank
        if cpu.any():
            host_cat = np.isin(cat, ("cpu_op", "annotation"))
            cpu_comm = _name_mask(ev, "name", rules.cpu_comm + rules.extra_comm)
            excluded = _name_mask(ev, "name", rules.cpu_compute_exclude + rules.extra_comm)
            comm_thread = _name_mask(ev, "thread_name", rules.cpu_comm_threads)
            kind[cpu & (cat == "cpu_op") & ~excluded & ~comm_thread] = 0
            rank = ev["rank"].to_numpy()
            no_ops = cpu & ~np.isin(rank, np.unique(rank[cat == "cpu_op"]))
            if no_ops.any() and rules.cpu_compute_ranges:
                phase = _name_mask(ev, "name", rules.cpu_compute_ranges)
                kind[no_ops & (cat == "annotation") & phase] = 0
            kind[cpu & host_cat & cpu_comm] = 1
    events = ev.copy()
    events["kind"] = pd.Categorical.from_codes(kind, ["compute", "comm", "memory", "none"])
    return Timeline(events, _note_unseen_comm(timeline, kind))


def _note_unseen_comm(timeline: Timeline, kind: np.ndarray) -> tuple[TraceInfo, ...]:
    """A CPU rank read from Nsight Systems with no communication activity says why: nsys does
    not see gloo's work, so zero communication there means "not visible", not "none"."""
    blind = [t for t in timeline.traces if t.format == "nsys" and t.device_kind == "cpu"]
    if not blind:
        return timeline.traces
    with_comm = set(np.unique(timeline.events["rank"].to_numpy()[kind == 1]).tolist())
    note = (
        "this capture has no communication activity the tool can see (CPU run under nsys: "
        "without the PyTorch profiler there are no gloo:* work items, and the program marked no "
        "collective as an NVTX range named gloo:<collective>, as the reference workloads do); "
        "its communication numbers are not measured, not zero"
    )
    return tuple(
        t.with_notes(note) if t in blind and t.rank not in with_comm else t for t in timeline.traces
    )


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a TOML config file.

    Recognised keys::

        [classify]
        comm_patterns = ["^MyAllReduce"]      # extra comm patterns (GPU and CPU)
        [steps]
        step_regex = "^train_step"
        [thresholds]
        exposed_ratio = 0.10                   # exposed-communication threshold (share of step)
        idle_ratio = 0.20                      # idle-bound threshold (share of step)
    """
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{p}: config file not found") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{p}: not valid TOML ({exc}); see README 'Configuration'") from None
    known = {"classify", "steps", "thresholds"}
    unknown = set(data) - known
    if unknown:
        raise UsageError(
            f"{p}: unknown section(s) {sorted(unknown)}; expected {sorted(known)} (see README 'Configuration')"
        )
    return data
