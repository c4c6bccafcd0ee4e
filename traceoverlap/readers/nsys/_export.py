"""Running ``nsys export`` (an ``.nsys-rep`` to SQLite), and where the export is cached.

:func:`run_nsys_export` is the one place ``nsys export`` is run: by the reader for an
``.nsys-rep`` input (into the cache, :func:`exported`) and by ``traceoverlap profile --nsys``
(beside the report it made). One flag spelling (:func:`export_command`), one timeout, the file
written under a temporary name, checked (:func:`_whole`: nsys exits 0 on a full disk, leaving an
empty or cut file) and renamed, and one error naming the report with nsys's own last line when
it fails.

An export is reused only for the report it was made from: the report's size and SHA-256
(:func:`_content_key`) are recorded in the export (table :data:`SOURCE_TABLE`), and an export is
fresh only while that record matches the report as it is now. Modification times say nothing
(``cp -p``, ``rsync -a``, ``tar x`` give another report an older time).

The ``nsys`` child never outlives the export: it is killed on any error, interrupt or SIGTERM
(:func:`traceoverlap.core._signals.sigterm_exits` turns SIGTERM into an exit that runs the clean-up), and on Linux the
kernel kills it when this process dies (``PR_SET_PDEATHSIG``). The temporary folder of a process
killed anyway (SIGKILL) is named after its host and pid, and removed by the next export into that
folder once that pid is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import re
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from ...core._signals import sigterm_exits
from ...core.errors import TraceFormatError
from ...core.progress import activity

#: What to tell a user whose export cannot be read or made.
EXPORT_HINT = (
    "export the report with `nsys export --type=sqlite --output=report.sqlite report.nsys-rep`"
)
#: Seconds `nsys export` may take before it is abandoned (large reports take minutes).
EXPORT_TIMEOUT_S = 3600.0
#: The table of an export made here that records which report it was made from.
SOURCE_TABLE = "TRACEOVERLAP_EXPORT_SOURCE"
#: Prefix of the temporary folder an export is written in (then ``<host>-<pid>-<random>``).
_TEMP_PREFIX = ".traceoverlap-export-"


def exported(report: Path) -> Path:
    """The SQLite export of ``report`` (an .nsys-rep): the cached one while it was made from
    this very report (same size and SHA-256), else made now with ``nsys`` (which must then be on
    PATH)."""
    key = _content_key(report)
    cache = _export_cache_path(report, key)
    if _fresh(cache, report, key):
        return cache
    if _ours(cache) and not _whole(cache):
        # an empty or cut export (a full disk) is never kept, whatever happens next
        with contextlib.suppress(OSError):
            cache.unlink()
    nsys = shutil.which("nsys")
    if nsys is None and _whole(cache) and _recorded_key(cache) is None:
        # an export made elsewhere (`nsys export` by hand): nothing says it is of this report
        raise TraceFormatError(
            report,
            f"{cache.name} beside it was not exported by traceoverlap, so nothing says it is "
            "an export of this report, and `nsys` is not on PATH to export it again",
            f"pass {cache.name} itself if it is this report's export, or put Nsight Systems "
            "on PATH",
        )
    if nsys is None:
        cmd = export_command("nsys", Path(report.name), Path(report.with_suffix(".sqlite").name))
        raise TraceFormatError(
            report,
            "reading an .nsys-rep needs Nsight Systems (`nsys` is not on PATH)",
            f"install Nsight Systems, or run `{' '.join(cmd)}` where it is installed "
            "and pass the .sqlite file",
        )
    run_nsys_export(nsys, report, cache, key=key)
    return cache


def _fresh(export: Path, report: Path, key: str | None = None) -> bool:
    """Whether ``export`` is ours, whole, and records that it was made from ``report`` as it is
    now (``key``: its :func:`_content_key`, computed when not given)."""
    if not _ours(export) or not _whole(export):
        return False
    recorded = _recorded_key(export)
    return recorded is not None and recorded == (key or _content_key(report))


def _whole(p: Path) -> bool:
    """Whether ``p`` looks like a whole SQLite file: its header, a valid page size, and at least
    the pages its header counts (an empty or cut file is not). Reads 100 bytes."""
    try:
        size = p.stat().st_size
        with p.open("rb") as fh:
            head = fh.read(100)
    except OSError:
        return False
    if len(head) < 100 or head[:16] != b"SQLite format 3\x00":
        return False
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    if page < 512 or page & (page - 1) or size % page:
        return False
    pages = int.from_bytes(head[28:32], "big")
    # the header's page count is valid while its version field matches the change counter
    if pages and head[92:96] == head[24:28] and size < pages * page:
        return False
    return size >= page


def _recorded_key(p: Path) -> str | None:
    """The :func:`_content_key` recorded in the export ``p`` by :func:`_record_key`, or None."""
    try:
        con = sqlite3.connect(f"{p.resolve().as_uri()}?mode=ro", uri=True, timeout=0.5)
    except sqlite3.Error:
        return None
    try:
        row = con.execute(f'SELECT key FROM "{SOURCE_TABLE}"').fetchone()
    except sqlite3.Error:
        return None
    finally:
        con.close()
    return row[0] if row and isinstance(row[0], str) else None


def _record_key(p: Path, key: str) -> None:
    """Record ``key`` (the report's content) in the export ``p`` (not yet in its place)."""
    con = sqlite3.connect(p)
    try:
        with con:
            con.execute(f'CREATE TABLE IF NOT EXISTS "{SOURCE_TABLE}" (key TEXT NOT NULL)')
            con.execute(f'DELETE FROM "{SOURCE_TABLE}"')
            con.execute(f'INSERT INTO "{SOURCE_TABLE}" (key) VALUES (?)', (key,))
    finally:
        con.close()


def _ours(p: Path) -> bool:
    """Whether ``p`` is a regular file (not a link) that belongs to the user running us: an
    export somebody else planted beside a report in a shared folder is never trusted."""
    try:
        st = p.lstat()
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid()


def _export_cache_path(report: Path, key: str | None = None) -> Path:
    """Where the SQLite export of ``report`` lives: beside it (``report.sqlite``, what ``nsys
    export`` writes by default) when that is ours and fresh, or can be written there; else the
    per-user cache (:func:`_user_cache_dir`), named by the report's content (:func:`_content_key`,
    ``key`` when given), so the name can neither be predicted by others nor go stale when the
    report is replaced."""
    key = key or _content_key(report)
    beside = report.with_suffix(".sqlite")
    if _fresh(beside, report, key):
        return beside
    if os.access(report.parent, os.W_OK) and (_ours(beside) or not os.path.lexists(beside)):
        return beside
    return _user_cache_dir(report) / f"{key}.sqlite"


def _content_key(report: Path) -> str:
    """SHA-256 of the report's bytes, with its size: the cache key of its export."""
    try:
        with report.open("rb") as fh:
            digest = hashlib.file_digest(fh, "sha256").hexdigest()
            size = os.fstat(fh.fileno()).st_size
    except OSError as exc:
        raise TraceFormatError(report, f"cannot read the report: {exc.strerror or exc}") from None
    return f"{size}-{digest}"


def _user_cache_dir(report: Path) -> Path:
    """``$XDG_CACHE_HOME/traceoverlap/nsys`` (default ``~/.cache``), created with mode 0700;
    refused unless it is a real folder owned by us that nobody else can write or read."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    top = Path(base) / "traceoverlap"
    for folder in (top, top / "nsys"):
        try:
            folder.mkdir(mode=0o700, parents=folder is top, exist_ok=True)
            st = folder.lstat()
        except OSError as exc:
            raise TraceFormatError(
                report,
                f"cannot create the export cache folder {folder}: {exc.strerror or exc}",
                "set XDG_CACHE_HOME to a folder of yours, or export the report to SQLite "
                "yourself and pass the .sqlite file",
            ) from None
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise TraceFormatError(
                report,
                f"the export cache folder {folder} is not a private folder of yours (it must be "
                "a directory owned by you with mode 0700); refusing to trust what is in it",
                f"remove it, or `chmod 700 {folder}` if it is yours, or set XDG_CACHE_HOME",
            )
    return top / "nsys"


def export_command(nsys: str, report: Path, sqlite: Path) -> list[str]:
    """``nsys export`` of ``report`` (an .nsys-rep) to the SQLite file ``sqlite``."""
    return [
        nsys,
        "export",
        "--type=sqlite",
        "--force-overwrite=true",
        f"--output={sqlite}",
        str(report),
    ]


def run_nsys_export(
    nsys: str,
    report: Path,
    sqlite: Path,
    timeout_s: float = EXPORT_TIMEOUT_S,
    key: str | None = None,
) -> None:
    """Export ``report`` to ``sqlite`` with the ``nsys`` executable ``nsys``; its output is shown
    only when it fails: a :class:`TraceFormatError` naming the report, ending with nsys's own
    last line (or that it could not be run, did not finish in ``timeout_s``, or wrote an empty
    or incomplete file). The export records ``key`` (the report's :func:`_content_key`, computed
    when not given): what makes it reusable by :func:`exported`."""
    key = key or _content_key(report)
    _remove_stale_temporaries(sqlite.parent)
    # written into a fresh private folder (tempfile: no predictable name) beside the target and
    # renamed: an interrupted export never looks fresh, and nobody can plant or race the file
    try:
        work = Path(tempfile.mkdtemp(prefix=_temp_prefix(), dir=sqlite.parent))
    except OSError as exc:
        raise TraceFormatError(
            report, f"cannot write the export beside {sqlite}: {exc.strerror or exc}", EXPORT_HINT
        ) from None
    try:
        with sigterm_exits():
            partial = work / sqlite.name
            _export_into(nsys, report, partial, timeout_s)
            if not _whole(partial) or not _has_tables(partial):
                size = partial.stat().st_size
                raise TraceFormatError(
                    report,
                    f"`nsys export` exited 0 but wrote an empty or incomplete SQLite file "
                    f"({size:,} bytes); is the disk full?",
                    "free space where the report is (or set XDG_CACHE_HOME), then run again",
                )
            try:
                _record_key(partial, key)
            except sqlite3.Error as exc:
                raise TraceFormatError(
                    report,
                    f"cannot complete the export ({exc}); is the disk full?",
                    "free space where the report is, then run again",
                ) from None
            os.replace(partial, sqlite)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _has_tables(p: Path) -> bool:
    """Whether the SQLite file ``p`` opens and holds at least one table."""
    try:
        con = sqlite3.connect(f"{p.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return False
    try:
        (n,) = con.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()
    except sqlite3.Error:
        return False
    finally:
        con.close()
    return bool(n)


def _temp_prefix() -> str:
    return f"{_TEMP_PREFIX}{_host()}-{os.getpid()}-"


def _host() -> str:
    import socket  # only when exporting a report: an export already converted needs none

    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())[:64] or "host"


def _remove_stale_temporaries(folder: Path) -> None:
    """Remove the temporary export folders in ``folder`` that a process of this host, now gone,
    left (killed by SIGKILL, or by a power cut): only ours, only of pids no longer running."""
    pattern = re.compile(re.escape(f"{_TEMP_PREFIX}{_host()}-") + r"(\d+)-[^/]*\Z")
    try:
        names = [e.name for e in os.scandir(folder) if e.name.startswith(_TEMP_PREFIX)]
    except OSError:
        return
    for name in names:
        m = pattern.match(name)
        if m is None or int(m.group(1)) == os.getpid() or _running(int(m.group(1))):
            continue
        path = folder / name
        try:
            st = path.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
            shutil.rmtree(path, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: running
        return True
    return True


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the kernel SIGKILL the child when this process dies (Linux
    ``prctl(PR_SET_PDEATHSIG)``), or None where there is no such call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the call: follow it
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def _export_into(nsys: str, report: Path, partial: Path, timeout_s: float) -> None:
    cmd = export_command(nsys, report, partial)
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            preexec_fn=_die_with_parent(),
        )
    except OSError as exc:
        raise TraceFormatError(report, f"could not run `nsys export`: {exc}", EXPORT_HINT) from exc
    try:
        with activity(f"nsys export {report.name} to SQLite"):  # tens of seconds for 500 MB
            out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise TraceFormatError(
            report, f"`nsys export` did not finish in {timeout_s:g} s", EXPORT_HINT
        ) from None
    finally:
        if proc.poll() is None:  # an error, an interrupt, SIGTERM: nsys goes too
            proc.kill()
            with contextlib.suppress(BaseException):
                proc.communicate(timeout=10)
    if proc.returncode != 0 or not partial.is_file():
        lines = [ln for ln in (err or out or "").splitlines() if ln.strip()]
        last = lines[-1].strip()[-300:] if lines else f"exit status {proc.returncode}"
        raise TraceFormatError(report, f"`nsys export --type=sqlite` failed: {last}", EXPORT_HINT)
