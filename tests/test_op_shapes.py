"""CPU ops' ``shape`` codes from Kineto ``Input Dims`` (profiles with ``record_shapes=True``):
the same code for the same operator inputs in any step or layer, wrappers (autograd engine
``evaluate_function`` ops, which have no ``Input Dims``) taking their first nested op's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from traceoverlap.readers._shape import input_dims_codes
from traceoverlap.readers.kineto import read_kineto

BASE = 1_700_000_000_000_000_000
WRAP = "autograd::engine::evaluate_function: AddmmBackward0"


def _op(name: str, ts: float, dur: float, dims: Any = None, tid: int = 9) -> dict[str, Any]:
    e: dict[str, Any] = {"ph": "X", "cat": "cpu_op", "name": name, "pid": 9, "tid": tid,
                         "ts": ts, "dur": dur, "args": {}}  # fmt: skip
    if dims is not None:
        e["args"]["Input Dims"] = dims
    return e


def _doc(extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 9, "tid": 9,
         "ts": 0.0, "dur": 100.0},
        # two layers' backward: a wrapper [10, 20) around AddmmBackward0 [11, 19) around mm
        _op(WRAP, 10.0, 10.0),
        _op("AddmmBackward0", 11.0, 8.0, [[512, 64]]),
        _op("aten::mm", 12.0, 5.0, [[512, 64], [64, 256]]),
        _op(WRAP, 30.0, 10.0),
        _op("AddmmBackward0", 31.0, 8.0, [[512, 64]]),
        # a third with other sizes
        _op(WRAP, 50.0, 10.0),
        _op("AddmmBackward0", 51.0, 8.0, [[512, 256]]),
        # a wrapper with nothing nested; an op on another thread starting inside it is not its
        _op(WRAP, 70.0, 5.0),
        _op("AddmmBackward0", 71.0, 2.0, [[512, 64]], tid=10),
    ]  # fmt: skip
    return {"traceEvents": ev + (extra or []), "baseTimeNanoseconds": BASE}


def _codes(tmp_path: Path, doc: dict[str, Any]) -> dict[tuple[str, int], int]:
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    ev = read_kineto(p).events
    t = (ev["start_ns"] - BASE) // 1000
    return {(str(n), int(s)): int(c) for n, s, c in zip(ev["name"], t, ev["shape"], strict=True)}


def test_input_dims_codes_ignore_white_space() -> None:
    a, b, c, none = input_dims_codes([b"[[512, 64], []]", b"[[512,64],[]]", b"[[512, 65]]", b""])
    assert a == b and a != c and a >= 0 and c >= 0 and none == -1


def test_same_inputs_same_code_and_wrappers_take_the_nested_ops(tmp_path: Path) -> None:
    s = _codes(tmp_path, _doc())
    # the two [512, 64] layers share a code, the [512, 256] one has another
    assert s[("AddmmBackward0", 11)] == s[("AddmmBackward0", 31)] >= 0
    assert s[("AddmmBackward0", 51)] not in (-1, s[("AddmmBackward0", 11)])
    # each wrapper has its first nested op's code: the same operator on the same sizes
    assert s[(WRAP, 10)] == s[(WRAP, 30)] == s[("AddmmBackward0", 11)]
    assert s[(WRAP, 50)] == s[("AddmmBackward0", 51)]
    # nothing nested on its own thread: no shape; annotations never have one
    assert s[(WRAP, 70)] == -1 and s[("ProfilerStep#1", 0)] == -1
    assert s[("aten::mm", 12)] not in (-1, s[("AddmmBackward0", 11)])


def test_the_lenient_decode_gives_the_same_codes(tmp_path: Path) -> None:
    # a null device id sends the document to the lenient decoder: the codes must not change
    odd = {"ph": "X", "cat": "user_annotation", "name": "x", "pid": 9, "tid": 9, "ts": 90.0,
           "dur": 1.0, "args": {"device": None}}  # fmt: skip
    typed = _codes(tmp_path, _doc())
    loose = _codes(tmp_path, _doc([odd]))
    assert {k: v for k, v in loose.items() if k[0] != "x"} == typed


def test_no_input_dims_no_shapes(tmp_path: Path) -> None:
    doc = _doc()
    for e in doc["traceEvents"]:
        e.get("args", {}).pop("Input Dims", None)
    assert set(_codes(tmp_path, doc).values()) == {-1}
