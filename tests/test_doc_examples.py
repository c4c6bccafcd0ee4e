"""Every example output in README.md and docs/*.md is the tool's own (tools/doc_examples.py
writes them): a change to a number or a line of the output fails here until the docs are
regenerated with ``python tools/doc_examples.py``."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
from conftest import REPO

_spec = importlib.util.spec_from_file_location("doc_examples", REPO / "tools" / "doc_examples.py")
assert _spec is not None and _spec.loader is not None
doc_examples = importlib.util.module_from_spec(_spec)
sys.modules["doc_examples"] = doc_examples
_spec.loader.exec_module(doc_examples)

EXAMPLES = [
    (doc, m, ex)
    for doc in doc_examples.DOCUMENTS
    for m, ex in doc_examples.examples(doc.read_text(encoding="utf-8"), doc)
]

#: A fenced block that shows output: a console session, or a JSON document the tool writes.
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)


def _id(item: tuple[Path, re.Match[str], object]) -> str:
    doc, m, _ = item
    return f"{doc.name}:{m.string.count(chr(10), 0, m.start()) + 1}"


def test_the_docs_have_examples() -> None:
    # README's two analyze examples and its whatif, compare's, the JSON document's
    assert len(EXAMPLES) >= 5


@pytest.mark.parametrize("item", EXAMPLES, ids=[_id(x) for x in EXAMPLES])
def test_example_is_the_tools_output(item: tuple[Path, re.Match[str], object]) -> None:
    doc, m, ex = item
    generated = doc_examples.block(ex)
    if m["body"] != generated:
        old = m.string
        new = old[: m.start("body")] + generated + old[m.end("body") :]
        pytest.fail(
            f"{_id(item)}: the example is stale; run {doc_examples.FIX}\n"
            + doc_examples.diff(doc, old, new)
        )


@pytest.mark.parametrize("doc", doc_examples.DOCUMENTS, ids=lambda p: p.name)
def test_every_output_shown_is_generated(doc: Path) -> None:
    """A block that shows a command's output sits inside an example marker (commands without
    output, ```bash, are synopses and need none)."""
    text = doc.read_text(encoding="utf-8")
    marked = [(m.start("body"), m.end("body")) for m, _ in doc_examples.examples(text, doc)]
    loose = []
    for f in _FENCE.finditer(text):
        shows_output = f[2].startswith("$ ") or (f[1] == "json" and '"schema_version"' in f[2])
        if shows_output and not any(a <= f.start() < b for a, b in marked):
            loose.append(text.count("\n", 0, f.start()) + 1)
    assert not loose, (
        f"{doc.name}: output blocks at lines {loose} are not generated: mark them "
        "<!-- example: traceoverlap ... --> ... <!-- /example --> (tools/doc_examples.py)"
    )


def test_keep_marks_what_was_left_out() -> None:
    lines = ["a", "b", "c", "d", "e"]
    # keep b (up to c), then d to the end: a and c are left out, each marked once
    assert doc_examples._keep(lines, (("^b", "^c"), ("^d", ""))) == ["...", "b", "...", "d", "e"]
    # two adjacent segments: nothing between them is left out
    assert doc_examples._keep(lines, (("^a", "^b"), ("^b", "^c"))) == ["a", "b", "..."]


def test_json_first_cuts_lists_and_maps_of_objects() -> None:
    doc = {"steps": [{"x": 1}, {"x": 2}, {"x": 3}], "ranks": [0, 1], "m": {"a": {}, "b": {}}}
    assert doc_examples._first(doc) == {
        "steps": [{"x": 1}, "... 2 more"],
        "ranks": [0, 1],
        "m": {"a": {}, "...": "1 more"},
    }
