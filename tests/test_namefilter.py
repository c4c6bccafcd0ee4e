"""namefilter with optional characters (``data_?loader``): the literal paths and the block
prefilter stay exact (checked against ``re.search``), so the analysis's range filter, whose
host-cause pattern has one, keeps its C-level prefilter."""

from __future__ import annotations

import re

from conftest import name_candidates
from hypothesis import given
from hypothesis import strategies as st

from traceoverlap.core.options import AnalysisOptions
from traceoverlap.core.rules import Rules
from traceoverlap.rank.namefilter import NameTest, any_match, literals
from traceoverlap.rank.unit import HOST_CAUSE_RE, range_filter

_OPTIONAL = [
    HOST_CAUSE_RE.pattern,
    r"(?i)ab?c|x[yz]?w",
    r"^pre_?fix",
    r"^(on|of?f)$",
    r"mid_?dle",
]


def test_literals_expand_optional_characters() -> None:
    # data_?loader matches exactly data_loader and dataloader; [sz]? adds s, z or nothing
    assert sorted(literals("data_?loader") or []) == ["data_loader", "dataloader"]
    assert sorted(literals("a[sz]?b") or []) == ["ab", "asb", "azb"]
    # an alternative that can be empty, a ? after nothing, a lazy ?? and a stray ]: no literals
    for body in ("a?", "?a", "ab??", "x|?", "a]"):
        assert literals(body) is None, body


@given(st.text(alphabet=st.sampled_from("aAbBcCxXyYzZwW_dtlLoeEfFnNmMiIprs\u212a\n "), max_size=16))
def test_any_match_with_optional_characters_is_re_search(name: str) -> None:
    want = any(re.search(p, name) is not None for p in _OPTIONAL)
    assert any_match(_OPTIONAL)(name) == want


@given(
    st.lists(
        st.text(alphabet=st.sampled_from("aAbBcCxXyYzZwW_dtlLoeEfFnNmMiIprsk"), max_size=14),
        min_size=1,
        max_size=10,
    )
)
def test_candidates_with_optional_characters_cover_every_match(names: list[str]) -> None:
    test = NameTest(_OPTIONAL)
    cand, joined = name_candidates(test, names)
    assert cand is not None  # every pattern has literals to look for
    for name, c in zip(names, cand.tolist(), strict=True):
        if test(name):
            assert c, name


def test_the_analysis_range_filter_has_a_prefilter() -> None:
    # every built-in range pattern (step, phases, host causes, communication, waits) has a
    # literal to look for: the reader tests only the texts that contain one
    keep = range_filter(AnalysisOptions(), Rules())
    names = ["aten::mm, seq = 1", "DataLoader.next", "ProfilerStep#4", "aten::add"]
    cand, joined = name_candidates(keep, names)
    assert cand is not None
    assert cand.tolist() == [False, True, True, False]
    assert [keep(n) for n in names] == [False, True, True, False]


@given(
    st.lists(
        st.text(alphabet=st.sampled_from("xXyYzZaAbB:#_\u212a\x00 "), max_size=10),
        min_size=1,
        max_size=10,
    )
)
def test_candidates_with_short_and_non_ascii_needles(names: list[str]) -> None:
    # one-character needles (x), pairs across a NUL or a ":" and a needle no ASCII block holds
    test = NameTest(["x", r"^Yz", "b:#", "\u212aa", "(?i)zab"])
    cand, joined = name_candidates(test, names)
    if not joined.isascii():
        assert cand is None
        return
    assert cand is not None
    for name, c in zip(names, cand.tolist(), strict=True):
        if test(name):
            assert c, name
