"""model.in_categories / model.values_at: what pandas gives, by code."""

import numpy as np
import pandas as pd

from traceoverlap.core.model import in_categories, values_at


def test_in_categories_is_isin() -> None:
    # rows a, b, missing, c, a; "x" is no category; a missing value is never in the set
    col = pd.Series(pd.Categorical(["a", "b", None, "c", "a"]))
    assert in_categories(col, ("a", "x")).tolist() == [True, False, False, False, True]
    assert in_categories(col, ()).tolist() == [False] * 5
    text = pd.Series(["a", "b", None])
    assert in_categories(text, ("a",)).tolist() == [True, False, False]
    for values in (("a", "x"), ("c", "b"), ()):
        assert in_categories(col, values).tolist() == col.isin(list(values)).tolist()
    # more than a handful of wanted values: the lookup-table path
    many = pd.Series(pd.Categorical([f"n{i % 13}" for i in range(40)] + [None]))
    wanted = tuple(f"n{i}" for i in range(0, 13, 1) if i % 4)
    assert len(wanted) > 8
    assert in_categories(many, wanted).tolist() == many.isin(list(wanted)).tolist()


def test_values_at_is_to_numpy_then_take() -> None:
    col = pd.Series(pd.Categorical(["a", "b", None, "c", "a"]))
    rows = np.array([2, 0, 3, 0])
    got = values_at(col, rows)
    want = col.to_numpy()[rows]
    assert got.dtype == want.dtype == object
    assert got.astype(str).tolist() == want.astype(str).tolist() == ["nan", "a", "c", "a"]
    plain = pd.Series([10, 20, 30])
    assert values_at(plain, np.array([2, 1])).tolist() == [30, 20]
