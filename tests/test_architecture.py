"""The house shows its flow: one package per stage, each importing only the stages before it.

    core < readers < rank < run < whatif < reporters < record < cli

Checked on the source (ast, type-checking imports included), so a stray import fails here
instead of in review: only the CLI imports click, only reporters import plotly, the reduce never
sees events (except the documented re-reads), and the analysis never imports torch.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from traceoverlap.readers.formats import FORMATS

PKG = Path(__file__).resolve().parents[1] / "traceoverlap"

#: The stages, in import order: a module may import its own stage and the ones before it.
STAGES = ("core", "readers", "rank", "run", "whatif", "reporters", "record", "cli")

#: Top-level modules and what they may import: the lazy public API (``traceoverlap.analyze``...),
#: the entry point, and the names the Python API documents (docs/python-api.md), each the same
#: module object as its home in core.
TOP_LEVEL = {
    "traceoverlap": {"core", "rank", "run"},
    "traceoverlap.__main__": {"core", "cli"},
    "traceoverlap._version": set(),
    "traceoverlap.options": {"core"},
    "traceoverlap.schema": {"core"},
    "traceoverlap.vocab": {"core"},
}

#: The reduce works on the units' compact results. These modules of run/ read events on purpose:
#: ``analysis`` runs the map (and ``load`` returns a whole Timeline for exploring), ``detail`` and
#: ``across`` read one step of a unit again to draw it (the analysis keeps no events), and
#: ``results`` types ``Analysis.source``, the Timeline an analysis was made from when it was given
#: one (a stream cannot be read twice).
RUN_READS_EVENTS = {
    "traceoverlap.run.analysis",
    "traceoverlap.run.detail",
    "traceoverlap.run.across",
    "traceoverlap.run.results",
    # the map driver of Flight Recorder dumps (like run.analysis for traces): it hands the
    # reader's per-file function to run_map; the hang analysis gets the combined tables
    "traceoverlap.run.flightrec",
}


def _imports(path: Path) -> set[str]:
    """Absolute module names imported by ``path`` (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rel = path.relative_to(PKG.parent).with_suffix("")
    package = list(rel.parts[:-1])
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
                out.add(mod)
                out.update(f"{mod}.{a.name}" for a in node.names)
            elif node.module:
                out.add(node.module)
                out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


MODULES = sorted(p for p in PKG.rglob("*.py"))


def _name(p: Path) -> str:
    parts = p.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _stage(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else None


def _stages_imported(imports: set[str]) -> set[str]:
    out = set()
    for i in imports:
        parts = i.split(".")
        if parts[0] == "traceoverlap" and len(parts) > 1 and parts[1] in STAGES:
            out.add(parts[1])
    return out


def test_every_module_is_in_a_stage() -> None:
    loose = [_name(p) for p in MODULES if _stage(_name(p)) is None and _name(p) not in TOP_LEVEL]
    assert not loose, f"modules outside the stage packages: {loose}"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_stages_import_only_earlier_stages(path: Path) -> None:
    name = _name(path)
    used = _stages_imported(_imports(path))
    stage = _stage(name)
    if stage is None:
        assert used <= TOP_LEVEL[name], (name, used)
        return
    later = {s for s in used if STAGES.index(s) > STAGES.index(stage)}
    assert not later, f"{name} ({stage}) imports the later stage(s) {sorted(later)}"


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_libraries_stay_in_their_layer(path: Path) -> None:
    name = _name(path)
    roots = {i.split(".")[0] for i in _imports(path)}
    stage = _stage(name)
    if stage != "cli":
        assert "click" not in roots, f"{name} imports click: only the CLI may"
    if stage != "reporters":
        assert "plotly" not in roots, f"{name} imports plotly: only reporters may"
    if stage not in ("reporters", "cli"):
        assert "rich" not in roots, (
            f"{name} imports rich: formatting belongs to the reporters (the progress display is "
            "reporters/progress.py, reached through core/progress.py's hook)"
        )
    if stage not in ("record",):
        assert "torch" not in roots, f"{name} imports torch: the analyzer must not need it"


@pytest.mark.parametrize("path", [p for p in MODULES if _stage(_name(p)) == "run"], ids=_name)
def test_the_reduce_never_sees_events(path: Path) -> None:
    name = _name(path)
    if name in RUN_READS_EVENTS:
        return
    imports = _imports(path)
    reads = {i for i in imports if i.startswith("traceoverlap.readers") and "paths" not in i}
    assert not reads, f"{name} reads traces ({reads}): the reduce gets the units' results"
    assert "traceoverlap.core.model.Timeline" not in imports, (
        f"{name} takes a Timeline: the reduce gets the units' compact results, not events"
    )


def test_the_entry_point_imports_only_the_cli() -> None:
    # the CLI, the standard library's exit machinery (the quick exit after a command), and the
    # OpenBLAS setting made before numpy loads (core._blas) and the collector paused while the
    # modules load (core._collector): standard library only
    imports = _imports(PKG / "__main__.py")
    allowed = {"traceoverlap.cli", "traceoverlap.cli.main", "__future__.annotations"}
    allowed |= {"traceoverlap.core._blas", "traceoverlap.core._blas.one_thread"}
    allowed |= {"traceoverlap.core._collector", "traceoverlap.core._collector.pause"}
    allowed |= {"traceoverlap.core._collector.resume"}
    allowed |= {"__future__", "atexit", "os", "sys", "threading"}
    assert imports <= allowed, imports
    assert _imports(PKG / "core/_blas.py") <= {"__future__", "__future__.annotations", "os", "sys"}
    assert _imports(PKG / "core/_collector.py") <= {"__future__", "__future__.annotations", "gc"}


def test_vocabulary_sits_at_the_bottom() -> None:
    """Readers, the analysis and the reporters all use the vocabulary: it imports nothing from
    traceoverlap, so any module may import it without a cycle or an upward import."""
    imports = _imports(PKG / "core/vocab.py")
    assert not {i for i in imports if i.split(".")[0] == "traceoverlap"}, imports


#: The names a format goes by: ``TraceInfo.format``'s and the registry's (``sniff_format``).
FORMAT_NAMES = {"kineto", "nsys"} | {f.name for f in FORMATS}


def _format_tests(tree: ast.AST) -> list[int]:
    """Lines of ``tree`` that compare a value with a format name (``==``, ``!=``, ``in`` a
    literal tuple / list / set, or a ``match`` case)."""

    def names(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and node.value in FORMAT_NAMES
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return any(names(e) for e in node.elts)
        return False

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(names(n) for n in (node.left, *node.comparators)):
            lines.append(node.lineno)
        elif isinstance(node, ast.MatchValue) and names(node.value):
            lines.append(node.value.lineno)
    return lines


@pytest.mark.parametrize("path", [p for p in MODULES if _stage(_name(p)) != "readers"], ids=_name)
def test_only_readers_decide_on_the_format_name(path: Path) -> None:
    """Outside readers/ the format is data (printed, in the JSON): what a capture can show
    travels as ``TraceInfo`` fields set by its reader (``host_comm_seen``, ``ranges_filtered``,
    ``multiprocess_capture``), so a new format is a reader and a registry entry, and nothing
    downstream tests its name."""
    lines = _format_tests(ast.parse(path.read_text(encoding="utf-8")))
    assert not lines, f"{_name(path)} decides on a format name at lines {lines}"


def test_the_format_name_check_finds_one() -> None:
    tree = ast.parse(
        'a = t.format == "nsys"\nb = f in ("x", "kineto")\nc = t.format != "csv"\n'
        'match f:\n    case "nsys-rep":\n        pass\n'
    )
    assert _format_tests(tree) == [1, 2, 5]


#: What `analyze --format json` must not load: the other commands, the HTML / terminal stack
#: (plotly, rich), Dask (only with --scheduler), the Nsight reader (a Kineto input), the what-if
#: and its run graphs (the json format has no "What to try"). A correctness guard on the import
#: graph (each is only a cost there), not a timing: the benchmark times the imports.
NOT_FOR_JSON = (
    "plotly",
    "rich",
    "dask",
    "distributed",
    "traceoverlap.readers.nsys",
    "traceoverlap.whatif",
    "traceoverlap.rank.graph",
    "traceoverlap.reporters.text",
    "traceoverlap.reporters.html_report",
    "traceoverlap.cli.compare",
    "traceoverlap.cli.export",
    "traceoverlap.cli.hang",
    "traceoverlap.cli.profile",
    "traceoverlap.cli.report",
    "traceoverlap.cli.whatif",
)

_LIST_MODULES = """
import atexit, runpy, sys
out = sys.argv.pop(1)
def dump():
    with open(out, "w") as f:
        f.write("\\n".join(sorted(sys.modules)))
atexit.register(dump)
runpy.run_module("traceoverlap", run_name="__main__", alter_sys=True)
"""


def modules_loaded(tmp_path: Path, *argv: str) -> set[str]:
    """The modules ``traceoverlap ARGV`` has loaded when it exits (run in a child process)."""
    import subprocess
    import sys

    listing = tmp_path / "modules.txt"
    proc = subprocess.run(
        [sys.executable, "-c", _LIST_MODULES, str(listing), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=PKG.parent,
    )
    assert proc.returncode == 0, proc.stderr
    return set(listing.read_text().split())


def test_analyze_json_imports_only_what_it_needs(tmp_path: Path) -> None:
    fixture = PKG.parent / "fixtures" / "workloads" / "bucketed"
    loaded = modules_loaded(
        tmp_path, "analyze", str(fixture), "--format", "json", "-o", str(tmp_path / "out.json")
    )
    assert "traceoverlap.run.analysis" in loaded  # the listing is the analysis's own
    assert "traceoverlap.cli.analyze" in loaded
    needless = {m for m in loaded for bad in NOT_FOR_JSON if m == bad or m.startswith(bad + ".")}
    assert not needless, sorted(needless)
