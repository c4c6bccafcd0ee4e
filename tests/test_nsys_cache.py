"""The .nsys-rep export cache (issue 21, cache poisoning): an export is trusted only from places
nobody else can write (beside the report when the file is ours, or the per-user cache folder,
mode 0700), named by the report's content; temporary outputs never have predictable names."""

from __future__ import annotations

import hashlib
import os
import stat
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nsys_writer import NsysExport, fake_nsys_export  # noqa: E402

from traceoverlap.core.errors import TraceFormatError
from traceoverlap.readers.nsys import _export as nsys_reader  # noqa: E402
from traceoverlap.readers.nsys import read_nsys_rep  # noqa: E402


def _export(tmp_path: Path, kernel: str) -> Path:
    x = NsysExport()
    x.kernel(5, 0, 7, 100, 200, kernel, launch=50)
    return x.write(tmp_path / f"{kernel}.db")


def _read_only_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes = b"\x00binary report"
) -> Path:
    """A report in a folder we may not write (os.access says so: the tests may run as root)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    rep = folder / "run.nsys-rep"
    rep.write_bytes(content)
    old = time.time() - 100
    os.utime(rep, (old, old))
    real_access = os.access

    def access(path: object, mode: int, **kw: object) -> bool:
        if Path(str(path)) == folder and mode & os.W_OK:
            return False
        return real_access(path, mode, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "access", access)
    return rep


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home


def test_planted_export_in_shared_temp_is_never_read(
    tmp_path: Path, cache_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rep = _read_only_report(tmp_path, monkeypatch)
    # what the old code trusted: <tmp>/traceoverlap-nsys/<stem>-<sha1(path)[:16]>.sqlite
    digest = hashlib.sha1(str(rep.resolve()).encode()).hexdigest()[:16]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "shared-tmp"))
    shared = Path(tempfile.gettempdir()) / "traceoverlap-nsys"
    shared.mkdir(parents=True)
    _export(tmp_path, "planted").rename(shared / f"run-{digest}.sqlite")
    bindir = fake_nsys_export(tmp_path, _export(tmp_path, "genuine"))
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    tl = read_nsys_rep(rep)
    assert tl.events[tl.events["category"] == "kernel"]["name"].tolist() == ["genuine"]
    cache = cache_home / "traceoverlap" / "nsys"
    # one export, named <size>-<sha256 of the bytes>, nothing left over from the export
    want = f"{rep.stat().st_size}-{hashlib.sha256(rep.read_bytes()).hexdigest()}.sqlite"
    assert [p.name for p in cache.iterdir()] == [want]
    assert [p.name for p in rep.parent.iterdir()] == ["run.nsys-rep"]
    assert stat.S_IMODE(cache.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    # the second read reuses the cache: nsys ran once
    read_nsys_rep(rep)
    assert len((tmp_path / "calls.txt").read_text().splitlines()) == 1


def test_cache_key_follows_the_content_not_the_path(
    tmp_path: Path, cache_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rep = _read_only_report(tmp_path, monkeypatch, b"report A")
    key_a = nsys_reader._export_cache_path(rep).name
    rep.write_bytes(b"report B")  # same path and size, other bytes: another export
    key_b = nsys_reader._export_cache_path(rep).name
    assert key_a != key_b and key_a.startswith("8-") and key_b.startswith("8-")


@pytest.mark.parametrize("mode", [0o755, 0o777])
def test_cache_folder_others_can_open_is_refused(
    tmp_path: Path, cache_home: Path, mode: int
) -> None:
    top = cache_home / "traceoverlap"
    top.mkdir(parents=True)
    top.chmod(mode)
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"x")
    with pytest.raises(TraceFormatError, match="not a private folder of yours") as err:
        nsys_reader._user_cache_dir(rep)
    assert "\n" not in str(err.value) and "run.nsys-rep" in str(err.value)


def test_cache_folder_that_is_a_symlink_is_refused(tmp_path: Path, cache_home: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    cache_home.mkdir()
    (cache_home / "traceoverlap").symlink_to(target)
    with pytest.raises(TraceFormatError, match="not a private folder"):
        nsys_reader._user_cache_dir(tmp_path / "r.nsys-rep")


def test_export_beside_that_is_a_symlink_is_not_trusted(tmp_path: Path) -> None:
    # someone else's (or a linked) report.sqlite beside the report: not ours, never "fresh"
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"x")
    old = time.time() - 100
    os.utime(rep, (old, old))
    real = _export(tmp_path, "planted")
    (tmp_path / "run.sqlite").symlink_to(real)
    assert not nsys_reader._fresh(tmp_path / "run.sqlite", rep)
    assert nsys_reader._export_cache_path(rep).parent != tmp_path


def test_failed_export_leaves_no_temporary_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "nsys"
    script.write_text('#!/bin/sh\necho "Fatal: broken report" >&2\nexit 3\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    rep = tmp_path / "run" / "r.nsys-rep"
    rep.parent.mkdir()
    rep.write_bytes(b"x")
    with pytest.raises(TraceFormatError, match="broken report"):
        read_nsys_rep(rep)
    assert [p.name for p in rep.parent.iterdir()] == ["r.nsys-rep"]
