"""Running ``nsys export`` (an ``.nsys-rep`` to SQLite), and where the export is cached.

:func:`run_nsys_export` is the one place ``nsys export`` is run: by the reader for an
``.nsys-rep`` input (into the cache, :func:`exported`) and by ``traceoverlap profile --nsys``
(beside the report it made). One flag spelling (:func:`export_command`), one timeout, the file
written under a temporary name and renamed, and one error naming the report with nsys's own last
line when it fails.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from ...core.errors import TraceFormatError
from ...core.progress import activity

#: What to tell a user whose export cannot be read or made.
EXPORT_HINT = (
    "export the report with `nsys export --type=sqlite --output=report.sqlite report.nsys-rep`"
)
#: Seconds `nsys export` may take before it is abandoned (large reports take minutes).
EXPORT_TIMEOUT_S = 3600.0


def exported(report: Path) -> Path:
    """The SQLite export of ``report`` (an .nsys-rep): the cached one while it is fresh, else
    made now with ``nsys`` (which must then be on PATH)."""
    cache = _export_cache_path(report)
    if _fresh(cache, report):
        return cache
    nsys = shutil.which("nsys")
    if nsys is None:
        cmd = export_command("nsys", Path(report.name), Path(report.with_suffix(".sqlite").name))
        raise TraceFormatError(
            report,
            "reading an .nsys-rep needs Nsight Systems (`nsys` is not on PATH)",
            f"install Nsight Systems, or run `{' '.join(cmd)}` where it is installed "
            "and pass the .sqlite file",
        )
    run_nsys_export(nsys, report, cache)
    return cache


def _fresh(export: Path, report: Path) -> bool:
    return _ours(export) and export.stat().st_mtime >= report.stat().st_mtime


def _ours(p: Path) -> bool:
    """Whether ``p`` is a regular file (not a link) that belongs to the user running us: an
    export somebody else planted beside a report in a shared folder is never trusted."""
    try:
        st = p.lstat()
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid()


def _export_cache_path(report: Path) -> Path:
    """Where the SQLite export of ``report`` lives: beside it (``report.sqlite``, what ``nsys
    export`` writes by default) when that is ours and fresh, or can be written there; else the
    per-user cache (:func:`_user_cache_dir`), named by the report's content (:func:`_content_key`),
    so the name can neither be predicted by others nor go stale when the report is replaced."""
    beside = report.with_suffix(".sqlite")
    if _fresh(beside, report):
        return beside
    if os.access(report.parent, os.W_OK) and (_ours(beside) or not os.path.lexists(beside)):
        return beside
    return _user_cache_dir(report) / f"{_content_key(report)}.sqlite"


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
    nsys: str, report: Path, sqlite: Path, timeout_s: float = EXPORT_TIMEOUT_S
) -> None:
    """Export ``report`` to ``sqlite`` with the ``nsys`` executable ``nsys``; its output is shown
    only when it fails: a :class:`TraceFormatError` naming the report, ending with nsys's own
    last line (or that it could not be run, or did not finish in ``timeout_s``)."""
    # written into a fresh private folder (tempfile: no predictable name) beside the target and
    # renamed: an interrupted export never looks fresh, and nobody can plant or race the file
    try:
        work = Path(tempfile.mkdtemp(prefix=".traceoverlap-export-", dir=sqlite.parent))
    except OSError as exc:
        raise TraceFormatError(
            report, f"cannot write the export beside {sqlite}: {exc.strerror or exc}", EXPORT_HINT
        ) from None
    try:
        partial = work / sqlite.name
        _export_into(nsys, report, partial, timeout_s)
        os.replace(partial, sqlite)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _export_into(nsys: str, report: Path, partial: Path, timeout_s: float) -> None:
    cmd = export_command(nsys, report, partial)
    try:
        with activity(f"nsys export {report.name} to SQLite"):  # tens of seconds for 500 MB
            proc = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                errors="replace",
                check=False,
                timeout=timeout_s,
            )
    except subprocess.TimeoutExpired:
        raise TraceFormatError(
            report, f"`nsys export` did not finish in {timeout_s:g} s", EXPORT_HINT
        ) from None
    except OSError as exc:
        raise TraceFormatError(report, f"could not run `nsys export`: {exc}", EXPORT_HINT) from exc
    if proc.returncode != 0 or not partial.is_file():
        lines = [
            ln for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()
        ]  # the last line is nsys's own reason
        last = lines[-1].strip()[-300:] if lines else f"exit status {proc.returncode}"
        raise TraceFormatError(report, f"`nsys export --type=sqlite` failed: {last}", EXPORT_HINT)
