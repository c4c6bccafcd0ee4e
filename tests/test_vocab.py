"""The vocabulary is declared once (traceoverlap/core/vocab.py): step labels read and written in one
place, every word and default found once in the code, the docs stating the defaults the code has."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

import traceoverlap.core.options
from traceoverlap.core import vocab
from traceoverlap.core.vocab import (
    BLOCKED_FLOOR_NS,
    BLOCKED_PER,
    LOST_RATIO,
    STEP_RE,
    StepId,
    step_number,
)
from traceoverlap.rank.steps import marker_labels

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "traceoverlap"


@pytest.mark.parametrize(
    ("label", "parsed"),
    [
        (5, StepId(5, 1)),
        ("5", StepId(5, 1)),
        ("5#2", StepId(5, 2)),
        ("1010#3", StepId(1010, 3)),
        ("all", None),
        ("train_step", None),
        ("5#", None),
        (True, None),
    ],
)
def test_step_label_parse(label: object, parsed: StepId | None) -> None:
    assert StepId.parse(label) == parsed
    assert step_number(label) == (None if parsed is None else parsed.number)


def test_step_labels_round_trip() -> None:
    # markers ProfilerStep#5, #5, #6 in start order: the repeated 5 is labelled "5#2"
    names = ["ProfilerStep#5", "ProfilerStep#5", "ProfilerStep#6"]
    labels, note = marker_labels(names, STEP_RE)
    assert labels == [5, "5#2", 6]
    assert note is not None and "5 (2x)" in note
    ids = [StepId.parse(x) for x in labels]
    assert ids == [StepId(5), StepId(5, 2), StepId(6)]
    assert [i.label for i in ids if i is not None] == labels


def _vocabulary_words() -> set[str]:
    """Words that mean one thing only: families, verdicts, purposes (not ``unknown``), the
    transfer-bound finding, and the display words of causes, verdicts and purposes. (Cause names
    such as ``wait`` or ``host`` also name CSS classes and trace categories, so they are not
    searched for.)"""
    words = {v for k, v in vars(vocab.Family).items() if k.isupper()}
    words |= {v for k, v in vars(vocab.Bottleneck).items() if k.isupper()}
    words |= {v for k, v in vars(vocab.Purpose).items() if k.isupper()} - {"unknown"}
    words |= {vocab.FindingKind.TRANSFER_BOUND, vocab.STEP_MARKER_PREFIX}
    words |= set(vocab.CAUSE_WORDS.values()) | set(vocab.PURPOSES.values())
    return words | (set(vocab.SHORT_BOTTLENECK.values()) - {"compute"})


def test_no_word_written_twice() -> None:
    """Outside vocab.py no string literal spells a vocabulary word (or contains the step marker
    prefix): every use goes through the constant."""
    words = _vocabulary_words()
    found = []
    for path in sorted(PKG.rglob("*.py")):
        if path.name == "vocab.py":
            continue
        src = path.read_text(encoding="utf-8")
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type != tokenize.STRING or tok.string.endswith('"""'):
                continue
            body = tok.string.lstrip("rbfRBF")[1:-1]
            if body in words or vocab.STEP_MARKER_PREFIX in body:
                found.append(f"{path.relative_to(ROOT)}:{tok.start[0]}: {tok.string}")
    assert not found, "\n".join(found)


def test_the_oracle_keeps_its_own_names() -> None:
    """tests/oracle.py checks the analysis from the contract: it must not import the vocabulary
    it checks (nor anything else of traceoverlap)."""
    src = (ROOT / "tests" / "oracle.py").read_text(encoding="utf-8")
    assert not re.search(r"^\s*(from|import)\s+traceoverlap", src, re.MULTILINE)


def test_docs_state_the_defaults_the_code_has() -> None:
    """The defaults are declared once; where prose cannot read the constant, it must agree with
    it (a changed default fails here until the docs follow)."""
    two = f"{LOST_RATIO:.2f}"  # 0.10
    pct = f"{LOST_RATIO * 100:.0f} %"  # 10 %
    diagnosis = (ROOT / "docs" / "diagnosis.md").read_text(encoding="utf-8")
    cli = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    numbers = (ROOT / "docs" / "numbers.md").read_text(encoding="utf-8")
    assert f"`lost_ratio` × step (default {two}" in diagnosis
    assert f"--lost-threshold {two}" in cli and f"lost_ratio = {two}" in cli
    assert f"under {pct} of it" in numbers and f"(under {pct} lost)" in numbers
    assert f"lost_ratio = {two}" in (traceoverlap.core.options.__doc__ or "")
    # diagnosis.md §8: gap × 100 ≤ duration or gap ≤ 1 000 000 ns
    assert f"gap × {BLOCKED_PER} ≤ duration" in diagnosis
    assert f"gap ≤ {BLOCKED_FLOOR_NS:,} ns".replace(",", " ") in diagnosis


def test_help_reads_the_defaults() -> None:
    from click.testing import CliRunner

    from traceoverlap.cli import main

    out = CliRunner().invoke(main, ["analyze", "--help"], terminal_width=200).output
    assert f"(default {LOST_RATIO:.2f})" in out
    assert f"(default '{vocab.DEFAULT_STEP_REGEX}')" in out
