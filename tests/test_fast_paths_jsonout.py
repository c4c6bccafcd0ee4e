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
    out = tmp_path / "w.json"
    res = _run("whatif", str(folder), "--format", "json")
    assert res.exit_code == 0, res.output
    assert _run("whatif", str(folder), "--format", "json", "-o", str(out)).exit_code == 0
    assert out.read_bytes().decode("utf-8") == res.output
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


_RAW = (ESC, "\x07", CSI8, DEL, NEL, "\udce9")


@pytest.mark.skipif(os.name != "posix", reason="byte file names")
def test_json_is_written_escaped_and_text_formats_stripped(tmp_path: Path) -> None:
    folder, _ = _poisoned_folder(tmp_path)
    out = tmp_path / "out.json"
    res = _run("analyze", str(folder), "-f", "json")
    assert res.exit_code == 0, res.output
    assert _run("analyze", str(folder), "-f", "json", "-o", str(out)).exit_code == 0
    written = out.read_bytes().decode("utf-8")  # valid UTF-8: no surrogate escapes written
    assert written == res.output  # stdout and a file: the same text
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
