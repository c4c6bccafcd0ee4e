"""The step regex is validated and compiled once, by its options; the map's units use that
pattern (it was compiled again by the range filter and at every use in every unit)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest
from conftest import WORKLOAD_FIXTURES

from traceoverlap import AnalyzeOptions, analyze
from traceoverlap.core.errors import UsageError
from traceoverlap.core.options import AnalysisOptions, build_options
from traceoverlap.core.vocab import DEFAULT_STEP_REGEX, STEP_RE


def test_the_options_hold_the_compiled_pattern() -> None:
    opts = build_options(step_regex="^train_step")
    assert opts.step_re.pattern == "^train_step"
    assert AnalysisOptions().step_re is STEP_RE  # the default, compiled once in vocab
    assert replace(opts, step_regex="^x").step_re.pattern == "^x"  # a copy compiles its own
    # the compiled pattern is not part of what options are: equal options hash alike
    assert opts == build_options(step_regex="^train_step")
    assert hash(opts) == hash(build_options(step_regex="^train_step"))
    with pytest.raises(UsageError, match="step_regex: '\\(' is not a valid regex"):
        AnalysisOptions(step_regex="(")


def test_one_compile_per_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    # every unit of the map (its range filter, its steps, its phases) uses the options' pattern
    compiled: list[object] = []
    compile_ = re.compile

    def spy(pattern: Any, flags: int = 0) -> re.Pattern[Any]:
        compiled.append(pattern)
        return compile_(pattern, flags)

    monkeypatch.setattr(re, "compile", spy)
    res = analyze(WORKLOAD_FIXTURES / "bucketed", AnalyzeOptions(step_regex=DEFAULT_STEP_REGEX))
    assert len(res.traces) > 1
    assert compiled.count(DEFAULT_STEP_REGEX) == 1
