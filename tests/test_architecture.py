"""The flow stays one-way: file -> reader -> Timeline -> steps -> metrics -> reporter.

Checked on the source (ast), so a stray import fails here instead of in review:
only the CLI imports click, only reporters import plotly, nothing below the reporters imports a
reporter or the CLI, the readers know nothing of the analysis, and the analysis never imports torch.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "traceoverlap"


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
    return out


MODULES = sorted(p for p in PKG.rglob("*.py"))


def _name(p: Path) -> str:
    return ".".join(p.relative_to(PKG.parent).with_suffix("").parts)


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_one_way_flow(path: Path) -> None:
    name = _name(path)
    imports = _imports(path)
    roots = {i.split(".")[0] for i in imports}
    in_reporters = name.startswith("traceoverlap.reporters")
    if name == "traceoverlap.__main__":
        # the CLI, the standard library's exit machinery (the quick exit after a command), and
        # the OpenBLAS setting made before numpy loads (traceoverlap._blas) and the collector
        # paused while the modules load (traceoverlap._collector): standard library only
        allowed = {"traceoverlap.cli", "traceoverlap.cli.main", "__future__.annotations"}
        allowed |= {"traceoverlap._blas", "traceoverlap._blas.one_thread"}
        allowed |= {"traceoverlap._collector", "traceoverlap._collector.pause"}
        allowed |= {"traceoverlap._collector.resume"}
        assert _imports(PKG / "_blas.py") <= {"__future__", "__future__.annotations", "os", "sys"}
        assert _imports(PKG / "_collector.py") <= {"__future__", "__future__.annotations", "gc"}
        allowed |= {"__future__", "atexit", "os", "sys", "threading"}
        assert imports <= allowed, imports
        return
    if name != "traceoverlap.cli":
        assert "click" not in roots, f"{name} imports click: only the CLI may"
        assert not any(i.startswith("traceoverlap.cli") for i in imports), name
    if not in_reporters:
        assert "plotly" not in roots, f"{name} imports plotly: only reporters may"
        assert "rich" not in roots or name in ("traceoverlap.inputs",), (
            f"{name} imports rich: formatting belongs to the reporters"
        )
        if name != "traceoverlap.cli":
            assert not any(i.startswith("traceoverlap.reporters") for i in imports), (
                f"{name} imports a reporter: reporters format the analysis, never the reverse"
            )
    if name.startswith("traceoverlap.readers"):
        analysis = ("steps", "metrics", "collectives", "diagnosis", "analysis", "rankmap")
        assert not any(i.startswith(f"traceoverlap.{m}") for i in imports for m in analysis), name
    assert "torch" not in roots, f"{name} imports torch: the analyzer must not need it"


def test_vocabulary_sits_at_the_bottom() -> None:
    """Readers, the analysis and the reporters all use the vocabulary: it imports nothing from
    traceoverlap, so any module may import it without a cycle or an upward import."""
    imports = _imports(PKG / "vocab.py")
    assert not {i for i in imports if i.split(".")[0] == "traceoverlap"}, imports
