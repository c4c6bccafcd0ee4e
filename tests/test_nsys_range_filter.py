"""The NVTX ranges the analysis reads: steps, phases, communication and waits (issue 20).

An ``emit_nvtx`` capture has one unique range per op; the analysis never uses them, so the reader
(given ``rankmap.range_filter``) leaves them out of the Timeline and counts them in a note. The
no-marker hints read every range name, so a unit without step markers reads the file again
unfiltered: outputs are the same either way, except the note.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))

from nsys_writer import MS, NVTX_MARK, NsysExport  # noqa: E402

from traceoverlap.core.model import split_units
from traceoverlap.core.options import AnalysisOptions, build_options
from traceoverlap.core.rules import Rules
from traceoverlap.rank.namefilter import NameTest, alternation, any_match, required_prefix
from traceoverlap.rank.unit import _map_units, map_file, range_filter, read_units, unit_step_detail
from traceoverlap.readers.nsys import read_nsys  # noqa: E402

T0 = 1_000 * MS
NCCL_AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def _export(tmp_path: Path, steps: bool = True) -> Path:
    x = NsysExport()
    x.process(300, "python3")
    x.thread(300, 300, "python3")
    x.nvtx(300, T0, T0 + 10 * MS, "rank 0", event_type=NVTX_MARK)
    if steps:
        x.nvtx(300, T0, T0 + 2 * MS, "ProfilerStep#1")  # a step (registered text)
    x.nvtx(300, T0 + 100_000, T0 + 900_000, "forward", registered=False)  # a phase
    x.nvtx(300, T0 + 1_000_000, T0 + 1_100_000, "nccl:all_reduce")  # a collective
    x.nvtx(300, T0 + 1_200_000, T0 + 1_300_000, "wait_tensor", registered=False)  # a wait
    # a range that can explain a late rank (blame names it): kept
    x.nvtx(300, T0 + 1_400_000, T0 + 1_500_000, "straggler_sleep", registered=False)
    # emit_nvtx op ranges: nothing uses them (one inline, one registered)
    for i in range(3):
        x.nvtx(300, T0 + 10_000 * i, T0 + 10_000 * i + 5_000, f"aten::mm, seq = {i}", False)
    x.nvtx(300, T0 + 50_000, T0 + 60_000, "aten::add, seq = 9")
    x.kernel(300, 0, 7, T0 + 1 * MS, T0 + 3 * MS, "gemm", launch=T0 + 10_000)
    x.kernel(300, 0, 20, T0 + 2 * MS, T0 + 5 * MS, NCCL_AR, launch=T0 + 20_000)
    return x.write(tmp_path / "run.sqlite")


def _annotations(path: Path, keep: object) -> list[str]:
    tl = read_nsys(path, keep) if keep is not None else read_nsys(path)  # type: ignore[arg-type]
    ev = tl.events
    return sorted(ev["name"][(ev["category"] == "annotation").to_numpy()].astype(str))


def test_only_step_phase_comm_and_wait_ranges_are_read(tmp_path: Path) -> None:
    path = _export(tmp_path)
    keep = range_filter(AnalysisOptions(), Rules())
    # 9 ranges: ProfilerStep#1, forward, nccl:all_reduce, wait_tensor, straggler_sleep are kept;
    # the 4 aten ones go (the "rank 0" mark is not a range: it still names the rank)
    assert _annotations(path, keep) == [
        "ProfilerStep#1",
        "forward",
        "nccl:all_reduce",
        "straggler_sleep",
        "wait_tensor",
    ]
    assert len(_annotations(path, None)) == 9
    tl = read_nsys(path, keep)
    info = tl.traces[0]
    assert info.rank_source == "nvtx"
    assert any(n.startswith("4 NVTX ranges were not read") for n in info.notes)
    assert not any("were not read" in n for n in read_nsys(path).traces[0].notes)


def test_user_patterns_are_kept(tmp_path: Path) -> None:
    # --step-regex and --comm-pattern name ranges too: those are kept
    path = _export(tmp_path)
    opts = build_options(step_regex=r"^aten::add")
    keep = range_filter(opts, Rules().with_comm_patterns([r"seq = 1$"]))
    names = _annotations(path, keep)
    assert "aten::add, seq = 9" in names and "aten::mm, seq = 1" in names
    assert "aten::mm, seq = 0" not in names


def test_filtered_map_equals_unfiltered(tmp_path: Path) -> None:
    path = str(_export(tmp_path))
    opts, rules = AnalysisOptions(), Rules()
    (full,) = _map_units(path, None, opts, rules)
    (res,) = map_file(path, opts, rules).units
    assert res.labels == full.labels
    for k, v in full.parts.items():
        assert res.parts[k].tolist() == v.tolist(), k
    assert res.instances.equals(full.instances)
    # a step's detail drawn from the filtered read has the phases, lanes and exposed spans of
    # the unfiltered one
    (filtered,) = read_units(path, opts, rules)
    (unfiltered,) = split_units(read_nsys(path))
    for step in res.labels:
        d = unit_step_detail(filtered, opts, rules, str(step))
        d_full = unit_step_detail(unfiltered, opts, rules, str(step))
        assert d is not None and d_full is not None
        assert d.phases[2] == d_full.phases[2] and d.lanes == d_full.lanes
        assert d.exposed[0].tolist() == d_full.exposed[0].tolist()
    extra = [n for n in res.notes + res.trace.notes if n not in full.notes + full.trace.notes]
    assert len(extra) == 1 and extra[0].startswith("4 NVTX ranges were not read")


def test_without_step_markers_every_range_is_read(tmp_path: Path) -> None:
    # the no-marker hints count every range name: the map reads the file again unfiltered
    path = str(_export(tmp_path, steps=False))
    (res,) = map_file(path, AnalysisOptions(), Rules()).units
    assert res.markers_found == 0
    assert ("aten::mm, seq = 0", 1) in res.range_names
    assert not any("were not read" in n for n in res.trace.notes)


def test_no_step_marker_read_keeps_every_range_at_once(tmp_path: Path) -> None:
    # issue 40: the filter's step-marker test finds no "ProfilerStep#N" among the 4 ranges it
    # keeps (forward, nccl:all_reduce, wait_tensor, straggler_sleep), so the reader keeps all 8
    # ranges of the export (those 4 and the 4 aten ones) in the same read, as the unfiltered
    # read does: same rows, names and notes, and not marked filtered
    path = _export(tmp_path, steps=False)
    keep = range_filter(AnalysisOptions(), Rules())
    assert len(_annotations(path, keep)) == 8
    assert _annotations(path, keep) == _annotations(path, None)
    once, plain = read_nsys(path, keep), read_nsys(path)
    assert once.events.equals(plain.events)
    assert once.traces == plain.traces and not once.traces[0].ranges_filtered
    # with a marker among the ranges kept, the read stays filtered (the 4 aten ranges dropped)
    (tmp_path / "m").mkdir()
    with_steps = _export(tmp_path / "m", steps=True)
    assert read_nsys(with_steps, keep).traces[0].ranges_filtered
    assert len(_annotations(with_steps, keep)) == 5


def test_no_step_marker_map_reads_the_file_once(tmp_path: Path, monkeypatch: object) -> None:
    # the map of a capture without step markers reads it once (the reader kept every range)
    import traceoverlap.readers as readers

    path = str(_export(tmp_path, steps=False))
    calls: list[object] = []
    real = readers.read_trace

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(args)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(readers, "read_trace", counted)  # type: ignore[attr-defined]
    (res,) = map_file(path, AnalysisOptions(), Rules()).units
    assert len(calls) == 1
    assert res.markers_found == 0 and ("aten::mm, seq = 0", 1) in res.range_names


def test_alternation_joins_patterns_or_declines() -> None:
    one = alternation([r"(?i)wait", r"^nccl:", r"x"])
    assert one is not None and one.pattern == r"(?i:wait)|(?:^nccl:)|(?:x)"
    assert [one.search(s) is not None for s in ("WAIT", "a nccl:", "nccl:b", "box")] == [
        True,
        False,
        True,
        True,
    ]
    assert alternation([r"(a)\1"]) is None  # a backreference would change meaning
    assert alternation([r"(?P<a>x)", r"(?P<a>y)"]) is None  # clashing group names


_BUILTIN = [
    r"^ProfilerStep#(\d+)$",
    r"(?i)forward|backward|optimi[sz]er|zero_grad|grad_sync",
    "nccl:",
    r"^gloo:",
    r"(?i)wait",
    r"^(forward|backward|optimizer)$",
    r"(?i)\bstep\s\d",
    r"^record_param_comms$",
    r"^c10d::",
    r"^gl[aeo]o$",
]


@given(st.text(alphabet=st.sampled_from("aAwWiItTsSkKſİK:#01 _\u212anclgoPrfeSp\n"), max_size=24))
def test_any_match_is_any_re_search(name: str) -> None:
    # the literal, case-folded and joined paths agree with re.search, pattern by pattern
    # (non-ASCII names that case-fold to ASCII letters, e.g. the Kelvin sign, included)
    want = any(re.search(p, name) is not None for p in _BUILTIN)
    assert any_match(_BUILTIN)(name) == want


def test_any_match_fixed_cases() -> None:
    test = any_match(_BUILTIN)
    assert test("ProfilerStep#3") and test("a nccl:x") and test("cudaStreamWAITEvent")
    assert test("\u212a") is False  # Kelvin sign: no pattern has a k
    assert test("STEP 1")
    # re.IGNORECASE folds the long s to s: a non-ASCII name takes the original regex
    assert test("ſtep 1") == (re.search(r"(?i)\bstep\s\d", "ſtep 1") is not None)
    assert not test("aten::mm, seq = 1")


def test_several_processes_come_out_grouped_by_rank(tmp_path: Path) -> None:
    # two processes, host rows read after GPU rows: the reader groups each rank's rows
    x = NsysExport()
    for pid, dev in ((100, 0), (200, 1)):
        x.process(pid, "python3")
        x.thread(pid, pid, "python3")
        x.nvtx(pid, T0, T0 + 2 * MS, "ProfilerStep#1")
        x.kernel(pid, dev, 7, T0 + MS, T0 + 3 * MS, "gemm", launch=T0 + 10_000)
    tl = read_nsys(x.write(tmp_path / "two.sqlite"))
    rank = tl.events["rank"].to_numpy()
    assert rank.tolist() == sorted(rank.tolist()) and set(rank.tolist()) == {0, 1}
    # each rank: its kernel, then its host rows (launch, step marker), as before grouping
    cats = tl.events["category"].astype(str).tolist()
    assert cats == ["kernel", "runtime", "annotation"] * 2


@given(
    st.lists(
        st.text(alphabet=st.sampled_from("aAwWiItTsSkK:#01 _nclgoPrfeSpabkdcmR"), max_size=20),
        min_size=1,
        max_size=12,
    )
)
def test_candidates_cover_every_match(names: list[str]) -> None:
    # the block prefilter may only leave out names that cannot match
    # the built-in patterns but the case-folded regex (it has no literal to look for)
    test = NameTest([*(p for p in _BUILTIN if "\\b" not in p), r"^Profiler", "ank", "ANK"])
    joined = "\x00".join(names) + "\x00"
    ends = np.cumsum([len(n) + 1 for n in names]) - 1
    cand = test.candidates(joined, ends)
    assert cand is not None  # every pattern here has a literal to look for
    for name, c in zip(names, cand.tolist(), strict=True):
        if test(name):
            assert c, name
    # a pattern without a required literal: no prefilter
    assert NameTest([r"\d+$"]).candidates(joined, ends) is None
    assert NameTest([r"(?i)\bstep\s\d"]).candidates(joined, ends) is None
    assert NameTest(["x"]).candidates("é\x00", np.array([1])) is None  # not ASCII


def test_required_prefix() -> None:
    assert required_prefix(r"^ProfilerStep#(\d+)$") == "ProfilerStep#"
    assert required_prefix(r"^abc?d") == "ab"  # c is optional
    assert required_prefix(r"^ab(c|d)") == "ab"
    assert required_prefix(r"^ab[|]c") == "ab"
    for p in (r"^a|b", r"x", r"^\d", r"^(a|b)c", r"^a[]|]|b"):
        assert required_prefix(p) is None, p


def _two_processes(tmp_path: Path, marker_in_second: bool) -> Path:
    # two GPU processes, neither with a step marker unless `marker_in_second` (in pid 200's)
    x = NsysExport()
    for pid, dev in ((100, 0), (200, 1)):
        x.process(pid, "python3")
        x.thread(pid, pid, "python3")
        if pid == 200 and marker_in_second:
            x.nvtx(pid, T0, T0 + 2 * MS, "ProfilerStep#1")
        x.nvtx(pid, T0 + 100_000, T0 + 900_000, "forward", registered=False)  # kept: a phase
        x.nvtx(pid, T0 + 10_000, T0 + 15_000, "aten::mm, seq = 0", False)  # refused, inline
        x.nvtx(pid, T0 + 50_000, T0 + 60_000, "aten::add, seq = 9")  # refused, registered
        x.kernel(pid, dev, 7, T0 + MS, T0 + 3 * MS, "gemm", launch=T0 + 10_000)
    return x.write(tmp_path / f"two-{marker_in_second}.sqlite")


def test_next_process_without_marker_reads_its_texts_once(
    tmp_path: Path, monkeypatch: object
) -> None:
    # issue 40: once one process of a file kept no step marker, the next process's read scans
    # the NVTX texts once, unfiltered, and keeps every range when its filtered read would have
    # found no marker either (pid 200 without one: the 3 ranges), else reads filtered as before
    # (pid 200 with "ProfilerStep#1": the step and "forward" kept, the 2 aten ranges dropped);
    # either way the Timeline is the one a read without the remembered fact gives (the scans
    # counted: the process's own, not the whole file's `rank N` rows)
    from traceoverlap.readers.nsys import _memo
    from traceoverlap.readers.nsys._schema import NVTX, Schema

    keep = range_filter(AnalysisOptions(), Rules())
    text_scans: list[str] = []
    real_scan = Schema.scan

    def counted(self: Schema, table: str, ints: object, texts: object = (), *a: object) -> object:
        if table == NVTX and "text" in texts and self.only is None:  # type: ignore[operator]
            text_scans.append(table)
        return real_scan(self, table, ints, texts, *a)  # type: ignore[arg-type]

    monkeypatch.setattr(Schema, "scan", counted)  # type: ignore[attr-defined]
    for marker, scans, kept in ((False, 1, 3), (True, 2, 2)):
        path = _two_processes(tmp_path, marker)
        _memo.forget()
        alone = read_nsys(path, keep, process=200)  # nothing remembered of the file
        _memo.forget()
        read_nsys(path, keep, process=100)  # no marker: two scans, and remembered
        assert _memo.recall(path, ("no step marker", NVTX)) is True
        del text_scans[:]
        after = read_nsys(path, keep, process=200)
        assert len(text_scans) == scans
        assert after.events.equals(alone.events) and after.traces == alone.traces
        ev = after.events
        assert int((ev["category"] == "annotation").sum()) == kept
        assert after.traces[0].ranges_filtered is marker
    _memo.forget()
