"""Fast paths of the ``analyze --format json`` path against what they replace (issue 40, round
3): :func:`traceoverlap.run.analysis._plain_rows`, the step rows the verdicts read, against
``DataFrame.to_dict("records")``."""

from __future__ import annotations

import numpy as np
import pandas as pd

from traceoverlap.run.analysis import _plain_rows


def test_plain_rows_are_to_dict_records_of_the_numpy_columns() -> None:
    rng = np.random.default_rng(7)
    for n in (0, 1, 5, 40):
        cols = {
            "step_ns": rng.integers(-(2**62), 2**62, n),
            "ratio": rng.random(n),
            "known": rng.random(n) < 0.5,
            "small": rng.integers(0, 9, n).astype(np.int32),
            "label": pd.array([f"{i}#2" for i in range(n)], dtype=object),
            "share": pd.array(
                np.where(rng.random(n) < 0.3, np.nan, rng.random(n)), dtype="Float64"
            ),
            "iteration_ns": pd.arrays.IntegerArray(rng.integers(0, 9, n), rng.random(n) < 0.5),
        }
        got = _plain_rows(cols)
        plain = ("step_ns", "ratio", "known", "small")
        want = [{k: r[k] for k in plain} for r in pd.DataFrame(cols).to_dict("records")]
        assert got == want
        # the same Python types too (int, float, bool), not numpy scalars
        for g, w in zip(got, want, strict=True):
            assert [type(v) for v in g.values()] == [type(w[k]) for k in g]
            assert list(g) == list(plain)
