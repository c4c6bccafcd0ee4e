"""Folders whose files do not say their rank, and folders holding a report next to its export."""

import json
from pathlib import Path

import pytest
from test_cli_analyze import write_trace

from traceoverlap import AnalyzeOptions, analyze
from traceoverlap.core.errors import UsageError
from traceoverlap.readers.paths import expand_paths
from traceoverlap.whatif.graph import run_graph
from traceoverlap.whatif.scenarios import load_graph


def _strip_rank(path: Path) -> Path:
    doc = json.loads(path.read_text())
    del doc["distributedInfo"]
    path.write_text(json.dumps(doc))
    return path


def test_guessed_ranks_are_numbered_in_file_order(tmp_path):
    # a.json and b.json carry no distributedInfo and no rank in their names: both default to
    # rank 0; the second is renumbered 1 (file order) with a note instead of being dropped
    _strip_rank(write_trace(tmp_path / "a.json"))
    _strip_rank(write_trace(tmp_path / "b.json", comm_ms=5))
    res = analyze(tmp_path)
    assert [(t.rank, Path(t.path).name) for t in res.traces] == [
        (0, "a.json"),
        (1, "b.json"),
    ]
    # rank 1 is b.json: comm 5 ms
    assert res.steps.set_index("rank")["comm_ns"].to_dict() == {0: 3_000_000, 1: 5_000_000}
    assert any("numbered rank 1 in file order" in n for n in res.notes)


def test_declared_duplicate_rank_is_refused(tmp_path):
    # both files say rank 0 in distributedInfo: a real clash, not a guess; they cannot be one
    # run (diagnosis.md §5), so the analysis stops with one line naming both files
    write_trace(tmp_path / "a.json")
    write_trace(tmp_path / "b.json", comm_ms=5)
    with pytest.raises(UsageError, match=r"rank 0 appears in two traces \(.*a.json and .*b.json"):
        analyze(tmp_path)


def test_whatif_joins_rank_files_by_the_same_rules(tmp_path):
    # the run graph of whatif reads the same units as analyze: guessed ranks are renumbered in
    # file order (a.json rank 0, b.json rank 1) instead of two units both called rank 0 ...
    for sub in ("guessed", "clash"):
        (tmp_path / sub).mkdir()
    _strip_rank(write_trace(tmp_path / "guessed" / "a.json"))
    _strip_rank(write_trace(tmp_path / "guessed" / "b.json", comm_ms=5))
    g = load_graph(tmp_path / "guessed")
    assert g.unit_rank.tolist() == [0, 1]
    assert any(n.startswith("rank 1: no rank recorded in") for n in g.notes)
    # the graph analyze builds for "What to try" is numbered the same way
    a = analyze(tmp_path / "guessed", AnalyzeOptions(graph=True))
    h = run_graph(a)
    assert h is not None and h.unit_rank.tolist() == [0, 1] and h.notes == g.notes
    # ... and two files that both declare rank 0 are refused, naming both, as analyze does
    write_trace(tmp_path / "clash" / "a.json")
    write_trace(tmp_path / "clash" / "b.json", comm_ms=5)
    with pytest.raises(UsageError, match=r"rank 0 appears in two traces \(.*a.json and .*b.json"):
        load_graph(tmp_path / "clash")


def test_report_next_to_its_export_is_read_once(tmp_path):
    (tmp_path / "run.nsys-rep").write_bytes(b"binary report")
    (tmp_path / "run.sqlite").write_bytes(b"")
    (tmp_path / "other.nsys-rep").write_bytes(b"binary report")
    assert [p.name for p in expand_paths(tmp_path)] == ["other.nsys-rep", "run.sqlite"]


def test_a_folder_is_listed_once_per_analysis(tmp_path, monkeypatch):
    # the analysis resolves its inputs once and passes them on: the folder is listed once (it
    # was listed three times: for a lone pipe, for the files, for the files found in a folder),
    # and a stray non-trace file found there is still skipped with a note
    write_trace(tmp_path / "rank0.json")
    (tmp_path / "config.json").write_text('{"lr": 0.1}')
    listed: list[str] = []
    iterdir = Path.iterdir

    def spy(self):
        listed.append(str(self))
        return iterdir(self)

    monkeypatch.setattr(Path, "iterdir", spy)
    res = analyze(tmp_path)
    assert listed == [str(tmp_path)]
    assert any(n.startswith(f"skipped {tmp_path / 'config.json'}") for n in res.notes), res.notes
