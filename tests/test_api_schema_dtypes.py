"""Issue 35: every DataFrame column of the Python API's results has the dtype its schema entry
names (traceoverlap.core.schema.pandas_dtype): null is <NA>, never NaN, never a -1 sentinel,
never an ``object`` column (lists aside). One walk over every table of a few analyses: the CPU
gloo fixture, a hand-written two-rank GPU Kineto trace, a multi-rank workload folder (blame)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import FIXTURES, WORKLOAD_FIXTURES

from traceoverlap import analyze
from traceoverlap.core import schema as S
from traceoverlap.reporters import json_report

#: the Python API's DataFrames and the schema table each one follows
TABLES = {
    "steps": S.STEPS,
    "windows": S.Table("windows", "", ()),
    "collectives.instances": S.COLLECTIVES,
    "collectives.per_rank": S.COLLECTIVE_PER_RANK,
    "collectives.stragglers": S.STRAGGLERS,
    "collectives.step_skew": S.STEP_SKEW,
    "collectives.credit": S.BLAME,
    "collectives.groups": S.Table("groups", "", ()),
    "collectives.blame": S.BLAME,
}


def _gpu_kineto(folder: Path) -> Path:
    """Two GPU ranks, one ProfilerStep#1 [0, 100) us each: a gemm, an NCCL all-reduce on
    stream 13 (no collective args: matched by stream order) and a memcpy, each launched (same
    correlation) inside the step; rank 1 arrives at the all-reduce 25 us later than rank 0."""
    folder.mkdir()
    for rank, late in ((0, 0), (1, 25)):
        ev: list[dict[str, object]] = [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
             "ts": 0, "dur": 100},
        ]  # fmt: skip
        acts = [
            ("kernel", "sgemm", 7, 10, 40),
            ("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float", 13, 30 + late, 70),
            ("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 7, 75, 80),
        ]
        for corr, (cat, name, stream, s, e) in enumerate(acts, start=1):
            ev.append(
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                 "tid": 1, "ts": corr, "dur": 1, "args": {"correlation": corr}}
            )  # fmt: skip
            ev.append(
                {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": s,
                 "dur": e - s,
                 "args": {"device": 0, "stream": stream, "correlation": corr}}
            )  # fmt: skip
        doc = {
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
            "traceEvents": ev,
        }
        (folder / f"rank{rank}.json").write_text(json.dumps(doc))
    return folder


def _frames(a) -> dict[str, pd.DataFrame]:  # noqa: ANN001
    out = {"steps": a.steps, "windows": a.windows}
    c = a.collectives
    if c is not None:
        for k in ("instances", "per_rank", "stragglers", "step_skew", "credit", "groups", "blame"):
            out[f"collectives.{k}"] = getattr(c, k)
    return out


def _wrong_columns(a) -> list[str]:  # noqa: ANN001
    """Every column whose dtype is not its schema entry's, or that is an object column of
    scalars, or a float column with NaN."""
    wrong = []
    for where, df in _frames(a).items():
        table = TABLES[where]
        declared = {c.name: c for c in table.columns}
        for name in df.columns:
            col = declared.get(name, S.SHARED_COLUMNS.get(name))
            got = str(df[name].dtype)
            if col is not None:
                if got != S.pandas_dtype(col):
                    wrong.append(f"{where}.{name}: {got}, schema {S.pandas_dtype(col)}")
            elif got == "object":
                if not all(isinstance(v, list | tuple | np.ndarray) for v in df[name]):
                    wrong.append(f"{where}.{name}: object column of scalars")
            elif got == "float64" and bool(df[name].isna().any()):
                wrong.append(f"{where}.{name}: float64 with NaN")
    return wrong


@pytest.fixture(scope="module")
def analyses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    gpu = _gpu_kineto(tmp_path_factory.mktemp("gpu") / "run")
    return {
        "gloo": analyze(FIXTURES / "gloo_collectives"),
        "gpu": analyze(gpu),
        "multi-rank": analyze(WORKLOAD_FIXTURES / "tp_slow"),
    }


@pytest.mark.parametrize("name", ["gloo", "gpu", "multi-rank"])
def test_every_column_has_its_schema_dtype(analyses: dict[str, object], name: str) -> None:
    a = analyses[name]
    assert a.collectives is not None and len(a.collectives.instances)  # type: ignore[attr-defined]
    assert _wrong_columns(a) == []


def test_schema_dtypes_are_the_nullable_ones() -> None:
    # the mapping itself, from the schema's words (docs/python-api.md "Column dtypes")
    assert S.pandas_dtype(S.DEVICE) == "Int64"  # int / null
    assert S.pandas_dtype(S.RANK) == "int64"  # int, never null
    assert S.pandas_dtype(S.OVERLAP_RATIO) == "Float64"
    assert S.pandas_dtype(S.STEP) == "string"  # a label: 4, "4#2", "all"
    assert S.pandas_dtype(S.WAIT_KNOWN) == "bool"
    assert S.pandas_dtype(S.BOTTLENECK) == "str"


def test_gpu_run_nulls_are_na_and_json_unchanged(analyses: dict[str, object]) -> None:
    a = analyses["gpu"]
    s = a.steps  # type: ignore[attr-defined]
    # pid is known on a Kineto trace; the GPU is device 0
    assert s["device"].tolist() == [0, 0] and s["step"].tolist() == ["1", "1"]
    inst = a.collectives.instances  # type: ignore[attr-defined]
    # no collective args on the kernels: process group and seq are null, not None / -1
    assert inst["process_group"].isna().all() and inst["seq"].isna().all()
    # rank 1 arrived 25 us after rank 0: it is the last rank, and rank 0 waited for it
    assert inst["last_rank"].tolist() == [1]
    pr = a.collectives.per_rank.set_index("rank")  # type: ignore[attr-defined]
    assert pr.loc[0, "waited_for_rank"] == 1 and pr.loc[1, "waited_for_rank"] is pd.NA
    # JSON: the labels are numbers again, nulls are null
    doc = json.loads(json_report.render(a))  # type: ignore[arg-type]
    assert [r["step"] for r in doc["steps"]] == [1, 1]
    assert [(c["process_group"], c["seq"]) for c in doc["collectives"]] == [(None, None)]
    assert doc["summary"]["run"]["worst_step"]["step"] == 1


def test_blame_explained_ratio_is_float64_with_na(analyses: dict[str, object]) -> None:
    b = analyses["multi-rank"].collectives.blame  # type: ignore[attr-defined]
    assert len(b) and b["explained_ratio"].dtype == pd.Float64Dtype()
    assert b["late_at_start_ns"].dtype == pd.Int64Dtype()
