"""The fast paths of the analysis (issue 40) against the plain numpy / pandas / re code they
replace: each must give the same answer to the bit, on random inputs, or an output would move."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceoverlap.core.rules import Rules
from traceoverlap.rank.classify import name_matcher
from traceoverlap.rank.hostwait import pair_codes
from traceoverlap.rank.steps import _name_counts
from traceoverlap.run.results import Stats
from traceoverlap.run.summary import _ns_stats

ints = st.lists(st.integers(-3, 3), max_size=60)


@settings(max_examples=300, deadline=None)
@given(ints, st.lists(st.integers(0, 3), max_size=60), st.booleans(), st.booleans())
def test_pair_codes_are_the_rows_rank_among_distinct_pairs(a, b, big, grouped):
    n = min(len(a), len(b))
    x = np.asarray(a[:n], np.int64)
    # tids as large as real ones (10^12 apart): no packing of the two into one key
    y = np.asarray(b[:n], np.int64) * (10**12 if big else 1)
    if grouped:  # as readers give them: rows in runs of one thread
        o = np.lexsort((y, x))
        x, y = x[o], y[o]
    want = (
        np.unique(np.stack((x, y), axis=1), axis=0, return_inverse=True)[1].reshape(-1)
        if n
        else np.zeros(0, np.int64)
    )
    assert pair_codes(x, y).tolist() == want.tolist()


#: the rule lists the analysis asks, and user lists that a joined pattern must not misread:
#: back-references (group numbers shift), verbose mode (a comment would eat the closing paren),
#: a named group used twice (does not compile joined), scoped flags, anchors, alternation
PATTERN_LISTS = [
    Rules().gpu_comm,
    Rules().cpu_compute_exclude,
    Rules().cpu_comm_calls,
    ("(?i)^ab|c$", "(a)\\1", "(?i:z)x"),
    ("(?x)a # b", "q"),
    ("(?P<g>a)b", "(?P<g>c)"),
    ("^gloo:", "(?i)NCCL", "(?s)a.b"),
]
NAMES = st.text(alphabet="abcqxzNCLncl:_glo^$ \n", max_size=24)


@settings(max_examples=2000, deadline=None)
@given(NAMES, st.sampled_from(PATTERN_LISTS))
def test_name_matcher_is_any_search(name, patterns):
    want = any(re.search(p, name) for p in patterns)
    assert name_matcher(patterns)(name) is want
    assert name_matcher(patterns)(name) is want  # remembered


@pytest.mark.parametrize(
    "name",
    ["ncclDevKernel_AllReduce_Sum_f32", "RCCL_x", "void at::native::vectorized_elementwise",
     "c10d::allreduce_", "record_param_comms", "gloo:all_reduce", "dpsk::ep::dispatch",
     "multimem_all_reduce_kernel", "AllReduce"],
)  # fmt: skip
def test_rule_lists_on_real_names(name):
    for patterns in PATTERN_LISTS[:3]:
        assert name_matcher(patterns)(name) is any(re.search(p, name) for p in patterns)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 40),
    st.integers(1, 4),
    st.sampled_from([10, 10**6, 10**12]),
    st.integers(0, 2**31),
)
def test_ns_stats_are_the_per_column_figures(n, k, scale, seed):
    rng = np.random.default_rng(seed)
    ns = rng.integers(0, scale, size=(k, n)).astype(np.int64)
    cols = [f"m{i}" for i in range(k)]
    got = _ns_stats(cols, ns)
    for i, col in enumerate(cols):
        a = ns[i].astype(np.float64)  # what summarize did per column
        want = Stats(
            mean=float(a.mean()),
            median=float(np.median(a)),
            p90=float(np.percentile(a, 90)),
            min=float(a.min()),
            max=float(a.max()),
        )
        assert repr(got[col]) == repr(want)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "step#1", "step#2", None]), max_size=40), st.data())
def test_name_counts_are_value_counts(values, data):
    rows = np.asarray(
        data.draw(st.lists(st.booleans(), min_size=len(values), max_size=len(values)))
    )
    rows = rows.astype(bool) if rows.size else np.zeros(0, bool)
    names = pd.Series(values, dtype="category")
    want = names[rows].astype(str).value_counts()
    got = dict(_name_counts(names, rows))
    assert got == {str(k): int(v) for k, v in want.items()}
    assert dict(_name_counts(names.astype(object), rows)) == got
