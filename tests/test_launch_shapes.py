"""The Timeline's ``shape`` column: one code per distinct kernel launch shape (grid, block), the
same function in both readers (traceoverlap/readers/_shape.py); -1 where unknown."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import real_trace

from traceoverlap.readers import read_trace
from traceoverlap.readers._shape import shape_codes
from traceoverlap.readers.kineto import read_kineto


def test_codes_are_a_function_of_the_six_numbers() -> None:
    # every (grid, block) of a 12 x 12 x 3 x 4 x 2 x 2 lattice (3,456 shapes, dimensions 1..12):
    # equal rows get equal codes, distinct rows distinct ones, all in [0, 2**31)
    axes = [np.arange(1, k + 1) for k in (12, 12, 3, 4, 2, 2)]
    dims = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 6).astype(np.int64)
    codes = shape_codes(np.concatenate([dims, dims[::-1]]))
    assert codes.dtype == np.int32 and (codes >= 0).all()
    assert np.unique(codes[: len(dims)]).size == len(dims)
    assert np.array_equal(codes[len(dims) :], codes[: len(dims)][::-1])
    # grid and block are not interchangeable: (4,1,1 | 256,1,1) != (256,1,1 | 4,1,1)
    a, b = shape_codes(np.array([[4, 1, 1, 256, 1, 1], [256, 1, 1, 4, 1, 1]]))
    assert a != b
    # a dimension below 1 (missing: -1, or 0) is no shape
    bad = shape_codes(
        np.array([[-1, -1, -1, -1, -1, -1], [4, 0, 1, 256, 1, 1], [4, 1, 1, 256, 1, -1]])
    )
    assert bad.tolist() == [-1, -1, -1]


BASE = 1_700_000_000_000_000_000


def _kernel(name: str, ts: float, corr: int, **args: Any) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": 1.0,
        "args": {"correlation": corr, "device": 0, "stream": 7, **args},
    }


def _doc(odd: Any = None) -> dict[str, Any]:
    ev: list[dict[str, Any]] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 9, "tid": 9,
         "ts": 0.0, "dur": 100.0},
    ]  # fmt: skip
    # a launch carrying grid / block (ROCm traces do): a host row, no shape
    ev.append(
        {"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 9, "tid": 9,
         "ts": 1.0, "dur": 1.0, "args": {"correlation": 1, "grid": [4, 1, 1], "block": [256, 1, 1]}}
    )  # fmt: skip
    ev.append(_kernel("gemm", 10.0, 1, grid=[4, 1, 1], block=[256, 1, 1]))
    ev.append(_kernel("gemm", 20.0, 2, grid=[4, 1, 1], block=[256, 1, 1]))
    ev.append(_kernel("gemm", 30.0, 3, grid=[8, 1, 1], block=[256, 1, 1]))
    ev.append(_kernel("copy", 40.0, 4))  # no grid / block
    if odd is not None:
        ev.append(_kernel("odd", 50.0, 5, grid=odd, block=[256, 1, 1]))
    return {"traceEvents": ev, "baseTimeNanoseconds": BASE}


def _shapes(tmp_path: Path, doc: dict[str, Any]) -> dict[tuple[str, int], int]:
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    ev = read_kineto(p).events
    t = (ev["start_ns"] - BASE) // 1000  # ts, µs
    return {(str(n), int(s)): int(c) for n, s, c in zip(ev["name"], t, ev["shape"], strict=True)}


# a grid of two ints or four, of strings, of floats, beyond uint64, not a list: not a shape (the
# chunk goes through the lenient decoder, whose reading of the other kernels must not change);
# beyond int64 but within uint64: decoded, then not a shape either
ODD = [None, [4, 1], [4, 1, 1, 1], ["4", "1", "1"], [4.5, 1, 1], [2**64, 1, 1], "x", [2**63, 1, 1]]


@pytest.mark.parametrize("odd", ODD)
def test_kineto_kernels_get_their_grid_and_block(tmp_path: Path, odd: Any) -> None:
    got = _shapes(tmp_path, _doc(odd))
    gemm = shape_codes(np.array([[4, 1, 1, 256, 1, 1], [8, 1, 1, 256, 1, 1]])).tolist()
    # the same (grid, block) in both gemm rows, the third gemm another; the copy (no grid), the
    # launch (a host row) and the step marker have none
    assert got[("gemm", 10)] == got[("gemm", 20)] == gemm[0]
    assert got[("gemm", 30)] == gemm[1]
    assert got[("copy", 40)] == got[("hipLaunchKernel", 1)] == got[("ProfilerStep#1", 0)] == -1
    if odd is not None:
        assert got[("odd", 50)] == -1


def _distinct_pairs(path: Path) -> int:
    with gzip.open(path) as f:
        doc = json.load(f)
    pairs = {
        (tuple(e["args"]["grid"]), tuple(e["args"]["block"]))
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") == "kernel" and "grid" in e.get("args", {})
    }
    return len(pairs)


@pytest.mark.parametrize(
    "rel",
    [
        "kineto/a100_nccl_allreduce_rank0.json.gz",
        "kineto/amd_mi300x_ddp8_resnet_actckpt_rccl_rank0.json.gz",
    ],
)
def test_real_kineto_kernels_have_one_code_per_grid_and_block(rel: str) -> None:
    path = real_trace(rel)
    ev = read_kineto(path).events
    k = (ev["category"] == "kernel").to_numpy()
    shape = ev["shape"].to_numpy()
    # as many codes as distinct (grid, block) pairs in the JSON (A100: 122, MI300X: 82); only
    # kernels have one (MI300X: 757 of its 2,995 kernels carry no grid: -1)
    assert np.unique(shape[k & (shape >= 0)]).size == _distinct_pairs(path)
    # rows other than kernels have none, CPU ops aside (their Input Dims where the profile
    # recorded shapes: MI300X did; tests/test_op_shapes.py)
    op = (ev["category"] == "cpu_op").to_numpy()
    assert (shape[~k & ~op] == -1).all()


def test_real_nsys_kernels_have_one_code_per_grid_and_block() -> None:
    path = real_trace("nsys/fsdp_2gpu_h100.sqlite")
    ev = read_trace(path).events
    con = sqlite3.connect(path)
    try:
        (pairs,) = con.execute(
            "SELECT COUNT(*) FROM (SELECT DISTINCT gridX, gridY, gridZ, blockX, blockY, blockZ "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL)"
        ).fetchone()
    finally:
        con.close()
    k = (ev["category"] == "kernel").to_numpy()
    shape = ev["shape"].to_numpy()
    assert (shape[k] >= 0).all() and (shape[~k] == -1).all()
    assert np.unique(shape[k]).size == pairs
