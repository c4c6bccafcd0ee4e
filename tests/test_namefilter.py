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


# the words of the purpose patterns (rank/purpose.py), cut and cased at random below, so that
# names hold whole keywords, parts of them, and the characters around anchors and \b
_PURPOSE_WORDS = [
    "## forward ##", ".forward", "forward", "_forward", "## backward ##", "backward",
    "autograd::engine::evaluate_function", "Optimizer.", "optimizer_step", "## optimizer ##",
    "DistributedDataParallel", "Reducer", "allreduce_hook", "comm_hook", "FSDP", "FullyShard",
    "zero_2", "zero3", "deepspeed", "unshard", "reshard", "_reduce_scatter_base",
    "reduce_scatter_tensor", "torchrec", "KJT", "All2All_Pooled", "alltoall_fwd_single",
    "alltoall_bwd_single", "input_dist", "dispatch", "combine", "deep_ep", "moe", "moe_",
    "expert", "AllToAll4D", "ulysses", "vllm", "RowParallel", "FromTP", "ToTPBackward", "tp_",
    "pipe", "stage", "c10d::send", "c10d::recv", "isend", "p2p", "aten::mm", "ProfilerStep#3",
    "record_param_comms", "nccl:all_reduce, op_id", "torch.", "\u212aJT", "diſpatch",
]  # fmt: skip
_NAME_PART = st.one_of(
    st.sampled_from(_PURPOSE_WORDS).flatmap(
        lambda w: st.tuples(st.integers(0, len(w)), st.integers(0, len(w)), st.booleans()).map(
            lambda t: (w[t[0] :] if t[1] == 0 else w[: t[1]]) if t[2] else w
        )
    ),
    st.text(alphabet=st.sampled_from("aAtTpP_ .:#\n\x00\u0130"), max_size=3),
)
_NAMES = st.lists(
    st.lists(_NAME_PART, max_size=4)
    .map("".join)
    .flatmap(lambda n: st.sampled_from([n, n.upper(), n.lower(), n.swapcase()])),
    max_size=90,
)


@given(_NAMES)
def test_name_block_is_re_search_per_name(names: list[str]) -> None:
    # the purpose patterns searched once over the joined names (NameBlock) find exactly what
    # re.search per name finds, whatever the case, NULs, newlines or non-ASCII characters
    import numpy as np

    from traceoverlap.rank.namefilter import NameBlock, required_literals
    from traceoverlap.rank.purpose import _COMM_CALL, _PYTORCH, PATTERNS

    block = NameBlock(names)
    for rx in [*PATTERNS.values(), _PYTORCH, _COMM_CALL]:
        assert required_literals(rx.pattern, rx.flags) is not None, rx.pattern  # prefiltered
        want = np.array([rx.search(n) is not None for n in names], dtype=bool)
        assert block.search(rx).tolist() == want.tolist(), rx.pattern
        assert block.any(rx) == bool(want.any()), rx.pattern


def test_required_literals_by_hand() -> None:
    from traceoverlap.rank.namefilter import required_literals

    # every alternative's longest literal run, lowered; a needle holding another is dropped
    assert required_literals(r"(?i)## forward ##|\.forward$|^forward$|_forward\b") == ("forward",)
    assert required_literals(r"zero_?[123]|ToTP(Backward)?\b|(^|[^a-z])tp_") == (
        "totp",
        "tp_",
        "zero",
    )
    # an alternative with no literal (a class, a wildcard), a non-ASCII one: none to be sure of
    assert required_literals(r"abc|[xy]+") is None
    assert required_literals(r"abc|.*") is None
    assert required_literals("(?i)\u212ajt") is None
