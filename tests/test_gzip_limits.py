"""gzip inflation is capped (issue 21): a small .json.gz that inflates to gigabytes is refused
with one line once it passes the ratio or the ceiling, both overridable from the environment."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_cli_analyze import write_trace

from traceoverlap.cli import main
from traceoverlap.core.errors import TraceFormatError
from traceoverlap.readers import _bytes as _input
from traceoverlap.readers import read_trace


def _bomb(path: Path, mib: int) -> Path:
    # a valid-looking trace head, then MiB of spaces: compresses ~1000x
    body = b'{"traceEvents": [' + b" " * (mib << 20) + b"]}"
    path.write_bytes(gzip.compress(body, compresslevel=9))
    return path


def test_ratio_cap_refuses_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bomb = _bomb(tmp_path / "bomb.json.gz", 8)
    compressed = bomb.stat().st_size
    # the ratio applies from 1 MiB here (256 MiB by default): 8 MiB of output > 200 x ~8 KiB
    monkeypatch.setattr(_input, "GZIP_RATIO_FROM_BYTES", 1 << 20)
    assert 200 * compressed < 8 << 20
    res = CliRunner().invoke(main, ["analyze", str(bomb)])
    assert res.exit_code == 2
    (line,) = res.output.strip().splitlines()
    assert line.startswith(f"traceoverlap: error: {bomb}: gzip data inflates to more than")
    assert "200 times its compressed size" in line and "TRACEOVERLAP_GZIP_MAX_RATIO" in line
    # raising the ratio lets it through (to the reader, which then judges the content)
    monkeypatch.setenv("TRACEOVERLAP_GZIP_MAX_RATIO", "100000")
    with pytest.raises(TraceFormatError) as err:
        read_trace(bomb)
    assert "inflates" not in str(err.value)


def test_ceiling_refuses_and_is_overridable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = write_trace(tmp_path / "t.json")
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(t.read_bytes()))
    size = len(t.read_bytes())
    monkeypatch.setenv("TRACEOVERLAP_GZIP_MAX_BYTES", str(size - 1))
    monkeypatch.setattr(_input, "GZIP_RATIO_FROM_BYTES", 1)
    monkeypatch.setenv("TRACEOVERLAP_GZIP_MAX_RATIO", "1000000")
    with pytest.raises(TraceFormatError, match=r"\(the ceiling\)"):
        read_trace(gz)
    monkeypatch.setenv("TRACEOVERLAP_GZIP_MAX_BYTES", str(size))  # exactly enough
    assert read_trace(gz).traces[0].path == str(gz)


def test_limits_default_and_bad_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # 6 MB compressed: 200 x 6 MB = 1.2 GB < 64 GiB, so the ratio decides
    assert _input.inflate_limit(6_000_000) == (1_200_000_000, "200 times its compressed size")
    # 1 KB: the ratio would allow 200 KB; small outputs (< 256 MiB) are always allowed
    assert _input.inflate_limit(1000)[0] == 256 << 20
    assert _input.inflate_limit(10**12) == (64 << 30, "the ceiling")
    monkeypatch.setenv("TRACEOVERLAP_GZIP_MAX_BYTES", "lots")
    with pytest.raises(TraceFormatError, match="TRACEOVERLAP_GZIP_MAX_BYTES: not a number"):
        _input.inflate_limit(1)
