"""Fast paths of the ``analyze --format json`` path against what they replace (issue 40, round
3): :func:`traceoverlap.run.analysis._plain_rows`, the step rows the verdicts read, against
``DataFrame.to_dict("records")``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def _conform_before(df: pd.DataFrame, table: Any) -> pd.DataFrame:
    """:func:`traceoverlap.core.schema.conform` before its empty-frame path: every cast through
    pandas, then ``assign``."""
    from traceoverlap.core.schema import INT, LABEL, NS, SHARED_COLUMNS, pandas_dtype
    from traceoverlap.core.schema import _unknown_as_na as unknown_as_na

    declared = {c.name: c for c in table.columns}
    out = {}
    for name, dtype in zip(df.columns, df.dtypes.tolist(), strict=True):
        col = declared.get(str(name), SHARED_COLUMNS.get(str(name)))
        if col is None:
            continue
        want = pandas_dtype(col)
        ns = col.nullable and col.type == INT and col.unit == NS
        if col.type != LABEL and not ns and str(dtype) == want:
            continue
        s = df[name]
        if col.type == LABEL:
            s = s.map(str, na_action="ignore") if s.dtype == object else s.astype(str)
        if ns:
            s = unknown_as_na(s)
        if str(s.dtype) != want:
            s = s.astype(want)
        out[name] = s
    return df.assign(**out) if out else df


def _same_frame(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    return (
        a.equals(b)
        and a.dtypes.tolist() == b.dtypes.tolist()
        and list(a.columns) == list(b.columns)
        and a.columns.dtype == b.columns.dtype
        and type(a.index) is type(b.index)
        and a.index.equals(b.index)
    )


def test_conform_of_empty_frames_is_the_pandas_casts() -> None:
    from traceoverlap.core.schema import SHARED_COLUMNS, TABLES, conform

    for table in TABLES:
        names = [c.name for c in table.columns]
        # as the analysis builds them empty: object columns, or numpy ones, plus an undeclared
        # column and a shared one
        for make in (
            lambda: pd.Series([], dtype=object),
            lambda: pd.Series(np.zeros(0, dtype=np.int64)),
            lambda: pd.Series(np.zeros(0, dtype=float)),
        ):
            cols = {n: make() for n in [*names, "not_declared", *list(SHARED_COLUMNS)[:2]]}
            df = pd.DataFrame(cols)
            for frame in (df, df.iloc[:0, : max(1, len(names) // 2)]):
                try:
                    want = _conform_before(frame, table)
                except (TypeError, ValueError):  # a cast pandas refuses: refused the same way
                    continue
                assert _same_frame(conform(frame, table), want), table.name


def test_conform_of_frames_with_rows_is_unchanged() -> None:
    from traceoverlap.core.schema import BLAME, STEP_SKEW, conform

    rng = np.random.default_rng(3)
    for n in (1, 4):
        for table in (BLAME, STEP_SKEW):
            cols: dict[str, Any] = {}
            for c in table.columns:
                if c.type in ("int", "float"):
                    cols[c.name] = pd.Series(list(rng.integers(-2, 9, n)), dtype=object)
                elif c.type == "label":
                    cols[c.name] = pd.Series([int(x) for x in rng.integers(0, 9, n)], dtype=object)
                elif c.type == "str":
                    cols[c.name] = pd.Series(["x"] * n, dtype=object)
                else:
                    cols[c.name] = pd.Series([[1, 2]] * n, dtype=object)
            df = pd.DataFrame(cols)
            assert _same_frame(conform(df, table), _conform_before(df, table))


def test_one_rank_json_does_not_load_to_dict(tmp_path: Path) -> None:
    """A one-rank Kineto trace's ``analyze --format json`` (the corpus' single files) reads its
    step rows without ``DataFrame.to_dict`` and so never imports its module."""
    from test_architecture import modules_loaded

    trace = Path(__file__).resolve().parent.parent / "fixtures/workloads/bucketed/rank0.json.gz"
    out = str(tmp_path / "out.json")
    loaded = modules_loaded(tmp_path, "analyze", str(trace), "--format", "json", "-o", out)
    assert "traceoverlap.run.analysis" in loaded  # the listing is the analysis's own
    assert "pandas.core.frame" in loaded
    assert "pandas.core.methods.to_dict" not in loaded


def _gloo(name: str, cat: str = "cpu_op") -> str:
    return (
        f'{{"ph": "X", "cat": "{cat}", "name": "{name}", "pid": 1, "tid": 2, "ts": 0, "dur": 1,'
        ' "args": {"Input Dims": [[64, 512]], "Input type": ["float"]}}'
    )


def test_scanned_chunks_with_and_without_ignored_or_gloo_rows_read_as_decoded() -> None:
    """:meth:`Columns.add_scanned` skips the per-string tests when no string of the chunk is an
    ignored category (every row kept) or starts ``gloo:`` (no input-sized message): the columns
    are the typed decode's either way."""
    from test_kscan import X, _check, _doc

    from traceoverlap.readers.kineto import _columns

    if _columns.SCANNER != "c":
        return
    plain = "{" + X + "}"
    ignored = plain.replace('"kernel"', '"python_function"')
    for events in (
        [plain, plain],  # neither
        [plain, ignored, plain],  # an ignored category
        [_gloo("gloo:all_reduce"), plain],  # a gloo message
        [_gloo("gloo:all_gather"), _gloo("x gloo:y"), plain],  # gloo: not at the start
        [_gloo("gloo:broadcast", "python_function"), ignored, plain],
        [_gloo("my_gloo:all_reduce"), plain],  # "gloo:" inside a name only
    ):
        assert _check(_doc(*events), must_scan=True)


def test_units_per_rank_is_the_groupby_nunique() -> None:
    from traceoverlap.reporters.json_report import _units_per_rank

    rng = np.random.default_rng(11)
    for n in (1, 2, 7, 300):
        for ranks, units in ((1, 1), (3, 2), (8, 16)):
            df = pd.DataFrame(
                {
                    "rank": rng.integers(0, ranks, n).astype(np.int64),
                    "unit": rng.integers(0, units, n).astype(np.int64),
                    "x": np.arange(n),
                }
            )
            want = df.groupby("rank")["unit"].nunique().to_dict()
            got = _units_per_rank(df)
            assert got == want
            assert list(got) == list(want)  # the same ranks, in the same order


def _finding_rows_before(coll: Any, df: pd.DataFrame, traces: Any) -> pd.DataFrame:
    """:func:`traceoverlap.run.analysis._finding_rows` before: the keys as one sub-frame, each
    row's name cut on its own."""
    from traceoverlap.run.analysis import _size_words, short_name

    pr = coll.per_rank
    if pr.empty:
        return pr.assign(display=[], where=[])
    several = len(traces) > 1
    keys = pr[["unit", "window", "name"]]
    if bool(keys.isna().to_numpy().any()):
        pos = (pr.groupby(["unit", "window", "name"]).cumcount() + 1).tolist()
    else:
        seen: dict[tuple[Any, ...], int] = {}
        pos = []
        for k in zip(*(keys[c].tolist() for c in keys.columns), strict=True):
            seen[k] = seen.get(k, 0) + 1
            pos.append(seen[k])
    sizes = _size_words(coll, pr)
    return pr.assign(
        display=[
            f"{short_name(str(n))} #{p}{z}"
            for n, p, z in zip(pr["name"].tolist(), pos, sizes, strict=True)
        ],
        where=[
            (f"rank {r} step {s}" if several else f"step {s}")
            for r, s in zip(pr["rank"].tolist(), pr["step"].tolist(), strict=True)
        ],
    )


def test_finding_rows_are_as_before() -> None:
    from types import SimpleNamespace

    from traceoverlap.run.analysis import _finding_rows

    rng = np.random.default_rng(5)
    names = ["ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", "gloo:broadcast", "x" * 60]
    for n in (0, 1, 9, 200):
        for null_name in (False, True):
            for dtype in ("str", object):
                picked = [names[i] for i in rng.integers(0, len(names), n)]
                if null_name and n:
                    picked[0] = None  # type: ignore[call-overload]
                pr = pd.DataFrame(
                    {
                        "unit": rng.integers(0, 2, n).astype(np.int64),
                        "window": rng.integers(0, 3, n).astype(np.int64),
                        "name": pd.array(picked, dtype=dtype),
                        "rank": rng.integers(0, 4, n).astype(np.int64),
                        "step": pd.array([str(s) for s in rng.integers(0, 3, n)], dtype="string"),
                        "instance": rng.integers(0, 5, n).astype(np.int64),
                    }
                )
                inst = pd.DataFrame(
                    {
                        "instance": np.arange(5, dtype=np.int64),
                        "bytes": pd.array([8_200_000, None, 0, 1 << 30, 7], dtype="Int64"),
                        "busbw_gbps": pd.array([11.4, 3.0, None, None, 1.0], dtype="Float64"),
                    }
                )
                coll = SimpleNamespace(per_rank=pr, instances=inst)
                for traces in ([1], [1, 2]):
                    got = _finding_rows(coll, pr, traces)  # type: ignore[arg-type]
                    want = _finding_rows_before(coll, pr, traces)
                    assert _same_frame(got, want)


def test_c1_escape_is_the_regex_sub() -> None:
    import random
    import re

    from traceoverlap.reporters.json_report import _escape_c1

    c1 = re.compile("[\x7f-\x9f]")
    rng = random.Random(2)
    alphabet = ["a", "{", '"', "\\", "\n", "\x1b", "\x7e", "\x7f", "\x80", "\x9f", "\xa0", "é", "€"]
    texts = ["", "plain ascii {}", "\x7f", "x\x85y", "é\x9f", "\xa0"]
    texts += ["".join(rng.choices(alphabet, k=rng.randrange(0, 40))) for _ in range(400)]
    for text in texts:
        want = c1.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
        # (round 4: escaped on the encoder's UTF-8 bytes; the same text once decoded)
        assert _escape_c1(text.encode("utf-8")).decode("utf-8") == want
