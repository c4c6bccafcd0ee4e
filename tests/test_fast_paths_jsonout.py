"""Round 4 (issue 40), the JSON output of large runs: each fast path against a reference copy
of the code it replaced, on random and edge-case inputs (empty, NaN / NA, non-ASCII, control
characters, surrogate-escaped names); and the writer's skipped scan, which must never let a
control character through."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from test_cli_analyze import write_trace

from traceoverlap.cli import main
from traceoverlap.core.fmt import EscapedText, safe_text
from traceoverlap.core.schema import COLLECTIVE_PER_RANK, COLLECTIVES
from traceoverlap.core.vocab import as_label
from traceoverlap.reporters import json_report
from traceoverlap.reporters.json_report import encode

# every kind of character the filters and escapes care about
ESC, CSI8, DEL, NEL = "\x1b", "\x9b", "\x7f", "\x85"
_CHARS = ["a", "Z", " ", '"', "\\", "/", "\n", "\r", "\t", "\x00", "\x07", ESC, "\x1f", "~", DEL]
_CHARS += ["\x80", NEL, CSI8, "\x9f", "\xa0", "é", "µ", "€", "\u2028", "\U0001f600", "\udce9"]


# --- the encoder before round 4 (reference copy) -----------------------------------------------

_C1_BEFORE = re.compile("[\x7f-\x9f]")


def _escape_c1_before(text: str) -> str:
    if text.isascii() and "\x7f" not in text:
        return text
    return _C1_BEFORE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _encode_before(obj: Any, indent: int = 2) -> str:
    encoder = msgspec.json.Encoder(enc_hook=json_report._default)
    try:
        raw = encoder.encode(obj)
    except UnicodeEncodeError:
        raw = encoder.encode(json_report._valid_text(obj))
    text = msgspec.json.format(raw, indent=indent).decode("utf-8")
    return _escape_c1_before(text) + "\n"


def _random_text(rng: random.Random) -> str:
    return "".join(rng.choices(_CHARS, k=rng.randrange(0, 12)))


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return _random_text(rng)
    if kind == 1:
        return rng.choice([0, -1, 2**62, 1.5, -0.0, 1e300, True, False, None])
    if kind == 2:
        return rng.choice([np.int64(-3), np.float64("nan"), np.float64(2.5), np.bool_(True)])
    if kind == 3:
        return rng.choice([pd.NA, np.array([1, 2]), np.uint8(7)])
    if kind in (4, 5):
        return rng.choice(["", "plain", "Ünïcode µs", ESC + "]0;x\x07", "rank\udce90.json"])
    if kind == 6:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    if kind == 7:
        return tuple(_random_value(rng, depth + 1) for _ in range(rng.randrange(0, 3)))
    return {_random_text(rng): _random_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))}


@dataclasses.dataclass
class _Finding:
    name: str
    value: float | None


def test_encode_is_the_encoder_before() -> None:
    rng = random.Random(40)
    objs: list[Any] = [{}, [], "", {"a": []}, {"k" + DEL: "v" + NEL}, _Finding("x" + CSI8, None)]
    objs += [{"\udce9": ["\udce9" + ESC]}, [_Finding("é\udcff", 1.5)], "µ" * 3 + "\x9f"]
    objs += [_random_value(rng) for _ in range(600)]
    for obj in objs:
        got = encode(obj)
        assert type(got) is EscapedText
        assert got == _encode_before(obj), repr(obj)
        assert encode(obj, indent=0) == _encode_before(obj, indent=0)


def test_encoded_text_holds_nothing_safe_text_removes() -> None:
    """What lets ``write_text`` skip the scan: for any value, the encoder's text is the text
    ``safe_text`` would write."""
    rng = random.Random(41)
    for _ in range(600):
        text = encode(_random_value(rng))
        assert safe_text(text) == text
    every = {"".join(_CHARS): "".join(reversed(_CHARS)), "c": [chr(i) for i in range(0x2000)]}
    text = encode(every)
    assert safe_text(text) == text
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]", text)
    doc = json.loads(text)  # the exact text, once decoded; surrogates as U+FFFD
    assert doc["c"][:0x20] == [chr(i) for i in range(0x20)]
    assert doc["c"][0x7F:0xA0] == [chr(i) for i in range(0x7F, 0xA0)]


def test_escape_c1_bytes_is_the_str_regex() -> None:
    rng = random.Random(42)
    texts = ["", "\x7f", "\xc2", "Â\x80", "\x80\x9f\xa0\xbf", "µ" * 5, "\u0100\u0142"]
    texts += ["".join(rng.choices(_CHARS[:-1], k=rng.randrange(0, 30))) for _ in range(500)]
    for text in texts:
        want = _C1_BEFORE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
        assert json_report._escape_c1(text.encode("utf-8")).decode("utf-8") == want


def test_whatif_json_is_escaped_text_safe_text_keeps() -> None:
    rng = random.Random(43)
    for _ in range(300):
        obj = msgspec.to_builtins(_random_value(rng), enc_hook=json_report._default)
        obj = json_report._valid_text(obj)  # (json.dumps writes surrogates as \\udxxx escapes)
        text = EscapedText(json.dumps(obj, indent=2) + "\n")
        assert text.isascii() and safe_text(text) == text


@pytest.mark.skipif(os.name != "posix", reason="byte file names")
def test_whatif_json_is_written_escaped(tmp_path: Path) -> None:
    folder, _ = _poisoned_folder(tmp_path)
    res = _stdout_is_the_file(tmp_path, "whatif", str(folder), "--format", "json")
    assert res.output.isascii() and not [c for c in _RAW if c in res.output]
    json.loads(res.output)


# --- the writer: JSON as it is, every text format filtered -------------------------------------

POISON = ESC + "]0;PWNED\x07" + CSI8 + "2J" + DEL + NEL


def _poisoned_folder(tmp_path: Path) -> tuple[Path, Path]:
    """A one-rank run whose kernel, device and backend names hold ESC / C1 / DEL sequences, in a
    file whose name is not UTF-8 (a surrogate-escaped ``str`` once read)."""
    src = write_trace(tmp_path / "t.json")
    d = json.loads(src.read_text())
    d["distributedInfo"]["backend"] = "nccl" + POISON
    d["deviceProperties"] = [{"id": 0, "name": "A100" + POISON}]
    for e in d["traceEvents"]:
        if e["name"].startswith("nccl"):
            e["name"] = "ncclKernel_AllReduce" + POISON
    src.write_text(json.dumps(d))
    folder = tmp_path / "run"
    folder.mkdir()
    name = os.fsencode(folder) + b"/rank\xe90.json"
    os.rename(src, name)
    return folder, Path(os.fsdecode(name))


def _run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def _stdout_is_the_file(tmp_path: Path, *args: str) -> Any:
    """The command's result on stdout, having checked that ``-o FILE`` writes the same text (valid
    UTF-8: no surrogate escapes written)."""
    out = tmp_path / "out.json"
    res = _run(*args)
    assert res.exit_code == 0, res.output
    assert _run(*args, "-o", str(out)).exit_code == 0
    assert out.read_bytes().decode("utf-8") == res.output
    return res


_RAW = (ESC, "\x07", CSI8, DEL, NEL, "\udce9")


@pytest.mark.skipif(os.name != "posix", reason="byte file names")
def test_json_is_written_escaped_and_text_formats_stripped(tmp_path: Path) -> None:
    folder, _ = _poisoned_folder(tmp_path)
    written = _stdout_is_the_file(tmp_path, "analyze", str(folder), "-f", "json").output
    assert not [c for c in _RAW if c in written]
    assert "\\u001b]0;PWNED\\u0007\\u009b2J\\u007f\\u0085" in written
    doc = json.loads(written)
    assert doc["traces"][0]["backend"] == "nccl" + POISON  # the exact text, once decoded
    assert doc["traces"][0]["path"].endswith("rank\ufffd0.json")
    for fmt in ("table", "markdown", "csv"):
        res = _run("analyze", str(folder), "-f", fmt)
        assert res.exit_code == 0, res.output
        text_out = tmp_path / f"out.{fmt}"
        assert _run("analyze", str(folder), "-f", fmt, "-o", str(text_out)).exit_code == 0
        for text in (res.output, text_out.read_bytes().decode("utf-8")):
            assert not [c for c in _RAW if c in text], (fmt, text[:300])
            assert "\\u001b" not in text  # stripped, not escaped
            assert "rank\ufffd0.json" in text or fmt == "csv"  # the surrogate as U+FFFD


def test_write_text_writes_escaped_text_as_it_is(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    from traceoverlap.cli._common import write_text

    text = encode({"name": "x" + POISON, "path": "rank\udce90.json", "é": [1, None]})
    for output in (None, "-", str(tmp_path / "o.json")):
        write_text(text, output)
        got = capsysbinary.readouterr().out if output in (None, "-") else None
        got = got if got is not None else (tmp_path / "o.json").read_bytes()
        assert got == safe_text(text).encode("utf-8") == text.encode("utf-8")
    # a plain str holding the same JSON characters is still filtered: only the marker skips
    plain = "{" + ESC + "[2J}" + CSI8 + "\n"
    write_text(plain, None)
    assert capsysbinary.readouterr().out == b"{}\n"
    write_text(EscapedText(plain) + "", None)  # changed: a plain str again, filtered
    assert capsysbinary.readouterr().out == b"{}\n"


def test_the_registry_keeps_the_texts_type(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Format.render`` once made every text a plain ``str``: the JSON lost its marker (and was
    scanned) and the table its :class:`TerminalText` (our colours were stripped on a terminal)."""
    from traceoverlap.core.fmt import TerminalText
    from traceoverlap.reporters.formats import Format

    for text in (EscapedText("{}\n"), TerminalText("x"), "plain"):
        monkeypatch.setattr(Format, "function", lambda self, t=text: lambda *a, **k: t)
        got = Format("analysis", "json", (".json",), "json_report:render").render(object())
        assert got is text
    monkeypatch.setattr(Format, "function", lambda self: lambda *a, **k: 3)
    assert Format("analysis", "json", (".json",), "json_report:render").render(object()) == "3"


@pytest.mark.parametrize(
    "args", [["analyze", "-f", "json"], ["compare", "-f", "json"], ["whatif", "--format", "json"]]
)
def test_json_commands_skip_the_scan_text_commands_do_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    import traceoverlap.core.fmt as fmt

    scanned: list[str] = []
    real = fmt.safe_text

    def spy(text: str, keep_sgr: bool = False) -> str:
        scanned.append(text)
        return real(text, keep_sgr)

    monkeypatch.setattr(fmt, "safe_text", spy)
    t = str(write_trace(tmp_path / "t.json"))
    inputs = [t, t] if args[0] == "compare" else [t]
    res = _run(args[0], *inputs, *args[1:])
    assert res.exit_code == 0, res.output
    json.loads(res.output)
    assert not [s for s in scanned if s.startswith("{")]  # the JSON: written as it is
    res = _run(args[0], *inputs)  # the text format: scanned
    assert res.exit_code == 0, res.output
    assert scanned


# --- records and collectives_dict before round 4 (reference copies) -----------------------------


def _records_before(df: pd.DataFrame, columns: tuple[str, ...] | list[str]) -> list[dict[str, Any]]:
    cols = [c for c in columns if c in df.columns]
    values = []
    for c in cols:
        col = df[c]
        v = col.tolist()
        if isinstance(col.dtype, np.dtype) and col.dtype.kind in "iub":  # never NaN or NA
            values.append(v)
        elif c in json_report._LABELS:
            values.append([None if x is pd.NA or x is None else as_label(x) for x in v])
        else:
            values.append(
                [None if x is pd.NA or (isinstance(x, float) and x != x) else x for x in v]
            )
    return [dict(zip(cols, row, strict=True)) for row in zip(*values, strict=True)]


def _collectives_dict_before(coll: Any) -> dict[str, Any]:
    per: dict[int, dict[str, dict[str, Any]]] = {}
    fields = COLLECTIVE_PER_RANK.names
    no_launch = [c.name for c in COLLECTIVE_PER_RANK.columns if c.nullable]
    several = json_report._units_per_rank(coll.per_rank) if len(coll.per_rank) else None
    for r in _records_before(coll.per_rank, ["instance", "rank", "device", *fields]):
        key = str(r["rank"])
        if several is not None and int(several.get(r["rank"], 1)) > 1:
            key = f"{r['rank']}:{r['device']}"
        row = {f: r[f] for f in fields}
        for f in no_launch:
            if isinstance(row[f], (int, float)) and row[f] < 0:
                row[f] = None
        per.setdefault(int(r["instance"]), {})[key] = row
    colls = []
    for r in _records_before(coll.instances, COLLECTIVES.names):
        r["ranks"] = list(r["ranks"])
        r["per_rank"] = per.get(int(r["instance"]), {})
        colls.append(r)
    return {"collectives": colls}  # (the rest is unchanged: stragglers, blame)


def _same(a: Any, b: Any, where: str = "") -> None:
    """``a`` is ``b``: the same types (int is not float, None is None), keys in the same order."""
    assert type(a) is type(b), (where, a, b)
    if isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b or (a != a and b != b), (where, a, b)


_TEXT = ["", "x", "é µs", ESC + "[2J", CSI8 + DEL, "\udce9name", "4", "all"]


def _texts(rng: np.random.Generator, n: int) -> list[Any]:
    return [_TEXT[i] for i in rng.integers(0, len(_TEXT), n)]


def _column(rng: np.random.Generator, n: int, kind: str) -> pd.Series:
    """A column of ``n`` values of one of the dtypes the tables hold, NA / NaN in some rows."""
    ints = np.where(rng.random(n) < 0.5, rng.integers(-3, 4, n), rng.integers(0, 2**40, n))
    na = rng.random(n) < 0.3
    if kind == "int64":
        return pd.Series(ints, dtype="int64")
    if kind == "uint8":
        return pd.Series(rng.integers(0, 255, n), dtype="uint8")
    if kind == "bool":
        return pd.Series(rng.random(n) < 0.5)
    if kind in ("float64", "float32"):
        v = rng.normal(0, 1e3, n)
        v[na] = np.nan
        return pd.Series(v, dtype=kind)
    if kind == "Int64":
        return pd.Series(pd.array([None if m else int(x) for x, m in zip(ints, na)], "Int64"))
    if kind == "Float64":  # NA, and NaN that is not NA (0/0 in the masked array)
        s = pd.Series(pd.array(rng.normal(0, 1, n).tolist(), dtype="Float64"))
        s[na] = pd.NA
        return s / pd.Series(pd.array((rng.random(n) > 0.2).astype(float), dtype="Float64"))
    if kind == "boolean":
        return pd.Series(
            pd.array([None if m else bool(x % 2) for x, m in zip(ints, na)], "boolean")
        )
    if kind in ("string", "str"):
        return pd.Series([None if m else t for t, m in zip(_texts(rng, n), na)], dtype=kind)
    if kind == "label":
        labels = ["0", "4", "4#2", "all", "12"]
        vals = [None if m else labels[i] for i, m in zip(rng.integers(0, 5, n), na)]
        return pd.Series(vals, dtype="string")
    if kind == "label_object":
        vals = [[None, pd.NA, 4, "4#2", "all", "7", np.nan][i] for i in rng.integers(0, 7, n)]
        return pd.Series(vals, dtype=object)
    # object: anything a column may hold
    pool = [None, pd.NA, np.nan, np.float64("nan"), 1.5, 3, "t", (0, 1), (), "\udce9", True]
    return pd.Series([pool[i] for i in rng.integers(0, len(pool), n)], dtype=object)


_KINDS = ["int64", "uint8", "bool", "float64", "float32", "Int64", "Float64", "boolean"]
_KINDS += ["string", "str", "object"]


def test_records_are_the_records_before() -> None:
    rng = np.random.default_rng(44)
    for n in (0, 1, 2, 7, 300):
        cols = {f"c_{k}": _column(rng, n, k) for k in _KINDS}
        cols["step"] = _column(rng, n, "label")  # a label column (string)
        cols["c_object_label_like"] = _column(rng, n, "label_object")
        df = pd.DataFrame(cols)
        _same(json_report.records(df, list(df.columns)), _records_before(df, list(df.columns)))
        _same(json_report.records(df, ["nope", "step"]), _records_before(df, ["nope", "step"]))
        _same(json_report.records(df, []), _records_before(df, []))
        for label_kind in ("label_object", "int64", "object", "str"):
            d2 = pd.DataFrame({"step": _column(rng, n, label_kind)})
            _same(json_report.records(d2, ["step"]), _records_before(d2, ["step"]))


def _collectives(
    rng: np.random.Generator, n_inst: int, n_rows: int, sort: bool, each: int = 0
) -> Any:
    """A random matcher result: instances, and per-rank rows of some of them (and of some
    instance ids with no instance row), a rank's rows from one or several units. ``each``:
    instead, ``each`` rows of every instance, the instances numbered 0.. in order (the
    matcher's usual output)."""
    from types import SimpleNamespace

    ids = rng.permutation(n_inst * 2)[:n_inst] if n_inst else np.array([], dtype="int64")
    pr_inst = rng.choice(np.append(ids, [10**6]), n_rows) if n_rows else np.array([], "int64")
    if each:
        ids = np.arange(n_inst)
        pr_inst = np.repeat(ids, each)
        n_rows = len(pr_inst)
    if sort:
        pr_inst = np.sort(pr_inst)
    rank = rng.integers(0, 4, n_rows)
    unit = rank * 2 + ((rng.random(n_rows) < 0.2) & (rank % 2 == 0))  # ranks 0, 2: two units
    device = [None if x < 0 else int(x) for x in rng.integers(-1, 2, n_rows)]
    pr: dict[str, Any] = {
        "instance": pd.Series(pr_inst, dtype="int64"),
        "unit": pd.Series(unit, dtype="int64"),
        "rank": pd.Series(rank, dtype="int64"),
        "device": pd.Series(pd.array(device, dtype="Int64")),
    }
    for c in COLLECTIVE_PER_RANK.columns:
        kind = {"int": "int64", "bool": "bool", "str": "str"}.get(c.type, "int64")
        if c.nullable:
            kind = "string" if c.type == "str" else "Int64"
        pr[c.name] = _column(rng, n_rows, kind)
    inst: dict[str, Any] = {}
    for c in COLLECTIVES.columns:
        if c.name == "instance":
            inst[c.name] = pd.Series(ids, dtype="int64")
        elif c.name == "ranks":
            inst[c.name] = pd.Series([tuple(range(i % 4)) for i in range(n_inst)], dtype=object)
        elif c.name == "step":
            inst[c.name] = _column(rng, n_inst, "label")
        elif c.name != "per_rank":
            kind = {"int": "int64", "bool": "bool", "str": "str", "float": "Float64"}.get(
                c.type, "Int64"
            )
            if c.nullable and kind == "int64":
                kind = "Int64"
            inst[c.name] = _column(rng, n_inst, kind)
    return SimpleNamespace(per_rank=pd.DataFrame(pr), instances=pd.DataFrame(inst))


def test_collective_rows_are_the_rows_before() -> None:
    rng = np.random.default_rng(45)
    cases = [(0, 0, True), (1, 0, True), (0, 3, False), (1, 1, True), (5, 40, True)]
    cases += [(int(rng.integers(1, 60)), int(rng.integers(0, 200)), s % 2 == 0) for s in range(30)]
    cases += [(n, 0, True, e) for n in (1, 2, 9, 40) for e in (1, 2, 3, 8)]  # the usual shape
    cases += [(n, 0, False, e) for n in (2, 9) for e in (2, 3)]
    for n_inst, n_rows, sort, *each in cases:
        coll = _collectives(rng, n_inst, n_rows, sort, *each)
        if each and n_inst % 3 == 0:  # an instance with fewer rows; one without its row
            pr = coll.per_rank
            coll.per_rank = pr.iloc[1:] if sort else pr[pr["instance"] != 1]
            coll.instances = coll.instances.iloc[:-1] if n_inst % 2 else coll.instances
        want = _collectives_dict_before(coll)["collectives"]
        _same(json_report._collective_rows(coll, json_report._rows), want)
        structs = json_report._collective_rows(coll, json_report._struct_rows)
        assert encode(structs) == encode(want) == _encode_before(want)  # surrogates: U+FFFD


def test_struct_rows_are_the_dict_rows() -> None:
    rng = random.Random(46)
    cols = ["a", "class", "b c", "é", "per_rank", "f0"]
    for n in (0, 1, 5):
        values = [[_random_value(rng) for _ in range(n)] for _ in cols]
        structs = json_report._struct_rows(cols, values)
        dicts = json_report._rows(cols, values)
        assert encode(structs) == encode(dicts) == _encode_before(dicts)
        assert [msgspec.structs.asdict(s) for s in structs] == [
            dict(zip([f"f{i}" for i in range(len(cols))], d.values(), strict=True)) for d in dicts
        ]
    _same(json_report._struct_rows(["a", "a"], [[1], [2]]), [{"a": 2}])  # a repeated key
    _same(json_report._struct_rows([], []), [])


@pytest.mark.skipif(os.name != "posix", reason="byte file names")
def test_export_escapes_del_and_c1_as_the_json_does(tmp_path: Path) -> None:
    """``export -o -`` wrote msgspec's JSON as it is: C0 escaped, but DEL and C1 (an 8-bit CSI)
    raw on the terminal. Now escaped as ``analyze``'s JSON escapes them, to a file the same."""
    folder, _ = _poisoned_folder(tmp_path)
    res = _run("export", str(folder), "-o", "-")
    assert res.exit_code == 0, res.output
    out = tmp_path / "trace.json"
    assert _run("export", str(folder), "-o", str(out)).exit_code == 0
    written = out.read_bytes().decode("utf-8")
    stdout = res.stdout if hasattr(res, "stdout") else res.output
    assert not [c for c in (ESC, "\x07", CSI8, DEL, NEL) if c in stdout + written]
    assert "\\u009b2J\\u007f\\u0085" in written
    names = {e.get("name") for e in json.loads(written)["traceEvents"]}
    assert "ncclKernel_AllReduce" + POISON in names  # the exact text, once decoded
