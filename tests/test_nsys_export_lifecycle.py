"""The .nsys-rep export's life (issue 41): reused only for the report it was made from (its
content, not its time), never kept when nsys wrote an empty or cut file, and its ``nsys`` child
and temporary folder gone on SIGTERM, and on SIGKILL (the child dies with us; the next export
removes the folder). ``nsys`` is a stand-in shell script here: no Nsight Systems needed."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nsys_writer import NsysExport  # noqa: E402

from traceoverlap.core.errors import TraceFormatError  # noqa: E402
from traceoverlap.readers.nsys import read_nsys_rep  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _export(path: Path, kernel: str) -> Path:
    x = NsysExport()
    x.kernel(5, 0, 7, 100, 200, kernel, launch=50)
    return x.write(path)


def _kernels(rep: Path) -> list[str]:
    tl = read_nsys_rep(rep)
    return list(tl.events[tl.events["category"] == "kernel"]["name"])


def _fake_nsys(tmp_path: Path, body: str) -> Path:
    """A stand-in ``nsys`` (first on PATH through the caller) running ``body`` with ``$out``
    set to its ``--output=``; each call logged to ``calls.txt``."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    script = bindir / "nsys"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{tmp_path / "calls.txt"}"\n'
        'for a in "$@"; do case "$a" in --output=*) out="${a#--output=}";; esac; done\n'
        f"{body}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bindir


def _calls(tmp_path: Path) -> int:
    f = tmp_path / "calls.txt"
    return len(f.read_text().splitlines()) if f.exists() else 0


@pytest.fixture
def nsys_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in nsys that "exports" by copying ``tmp_path / "next.db"``, whatever it is now."""
    bindir = _fake_nsys(tmp_path, f'cp "{tmp_path / "next.db"}" "$out"')
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    return tmp_path / "next.db"


def _report(folder: Path, content: bytes, age_s: float) -> Path:
    folder.mkdir(exist_ok=True)
    rep = folder / "run.nsys-rep"
    rep.write_bytes(content)
    t = time.time() - age_s
    os.utime(rep, (t, t))
    return rep


# -- 1. reuse keyed on the report's content ----------------------------------------------------


def test_report_replaced_by_an_older_one_is_exported_again(
    tmp_path: Path, nsys_copies: Path
) -> None:
    rep = _report(tmp_path / "run", b"report A", age_s=100)
    _export(nsys_copies, "kernel_of_A")
    assert _kernels(rep) == ["kernel_of_A"]
    assert _calls(tmp_path) == 1
    assert _kernels(rep) == ["kernel_of_A"] and _calls(tmp_path) == 1  # reused: same report
    # `cp -p` of another report: other bytes, an mtime older than the export beside it
    nsys_copies.unlink()
    _export(nsys_copies, "kernel_of_B")
    _report(tmp_path / "run", b"report B", age_s=1000)
    assert _kernels(rep) == ["kernel_of_B"]
    assert _calls(tmp_path) == 2


def test_report_touched_but_unchanged_reuses_its_export(tmp_path: Path, nsys_copies: Path) -> None:
    rep = _report(tmp_path / "run", b"report A", age_s=100)
    _export(nsys_copies, "kernel_of_A")
    assert _kernels(rep) == ["kernel_of_A"]
    os.utime(rep)  # newer than its export, same bytes: still its export
    assert _kernels(rep) == ["kernel_of_A"] and _calls(tmp_path) == 1


# -- 2. an empty or cut export is never kept --------------------------------------------------


def test_empty_export_on_a_full_disk_is_refused_and_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # what nsys does on a full disk: exits 0, leaves a 0-byte file
    bindir = _fake_nsys(tmp_path, ': > "$out"')
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    rep = _report(tmp_path / "run", b"report", age_s=100)
    with pytest.raises(TraceFormatError, match="empty or incomplete") as err:
        read_nsys_rep(rep)
    assert "run.nsys-rep" in str(err.value) and "\n" not in str(err.value)
    assert [p.name for p in rep.parent.iterdir()] == ["run.nsys-rep"]
    # space freed: the next run exports again and reads it
    good = _export(tmp_path / "good.db", "k")
    _fake_nsys(tmp_path, f'cp "{good}" "$out"')
    assert _kernels(rep) == ["k"] and _calls(tmp_path) == 2


@pytest.mark.parametrize("cut", ["empty", "half"])
def test_cached_empty_or_cut_export_is_made_again(
    tmp_path: Path, nsys_copies: Path, cut: str
) -> None:
    rep = _report(tmp_path / "run", b"report", age_s=100)
    x = NsysExport()
    for i in range(400):  # a few pages, so that half of it is a cut file
        x.kernel(5, 0, 7, 100 + 10 * i, 105 + 10 * i, f"kernel_{i % 3}", launch=50 + 10 * i)
    x.write(nsys_copies)
    assert len(_kernels(rep)) == 400
    beside = rep.with_suffix(".sqlite")
    data = beside.read_bytes()
    beside.write_bytes(b"" if cut == "empty" else data[: len(data) // 2])
    assert len(_kernels(rep)) == 400  # not "not an SQLite file": discarded and made again
    assert _calls(tmp_path) == 2
    assert beside.stat().st_size == len(data)


# -- 5. the nsys child and the temporary folder on SIGTERM / SIGKILL ----------------------------


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _wait(cond: object, timeout_s: float = 20.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killed_during_export_leaves_no_nsys_and_no_temporary(
    tmp_path: Path, sig: signal.Signals
) -> None:
    # a slow nsys: writes an empty output (as nsys does first), says its pid, then waits
    pidfile = tmp_path / "nsys.pid"
    bindir = _fake_nsys(tmp_path, f': > "$out"\necho $$ > "{pidfile}"\nexec sleep 60')
    rep = _report(tmp_path / "run", b"report", age_s=100)
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen(
        [sys.executable, "-m", "traceoverlap", "analyze", str(rep)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert _wait(lambda: pidfile.exists() and pidfile.read_text().strip()), "nsys not run"
        nsys_pid = int(pidfile.read_text())
        temps = [p for p in rep.parent.iterdir() if p.name.startswith(".traceoverlap-export-")]
        assert len(temps) == 1 and (temps[0] / "run.sqlite").exists()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert _wait(lambda: not _alive(nsys_pid)), "nsys outlived the process"
    if sig == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert b"Traceback" not in err
        assert [p.name for p in rep.parent.iterdir()] == ["run.nsys-rep"]
        return
    # SIGKILL: nothing could clean up then; the next export into the folder does
    assert any(p.name.startswith(".traceoverlap-export-") for p in rep.parent.iterdir())
    good = _export(tmp_path / "good.db", "k")
    _fake_nsys(tmp_path, f'cp "{good}" "$out"')
    old = os.environ["PATH"]
    os.environ["PATH"] = env["PATH"]
    try:
        assert _kernels(rep) == ["k"]
    finally:
        os.environ["PATH"] = old
    assert sorted(p.name for p in rep.parent.iterdir()) == ["run.nsys-rep", "run.sqlite"]
