"""What a process has learnt of one export, kept for its next read of the same file.

A file is often read more than once by one process: ``analyze`` reads an export again with every
NVTX range when the first read (the ranges it uses) finds no step marker, and a read of one
process of a multi-process export needs facts of the whole file (its (pid, GPU) groups, the rows
whose text may name a rank) that every process's read would otherwise find again. What does not
depend on the read is kept here: the verdict of the integrity check, each table's row count and
leaf pages, the rows a condition selects, the groups. One SQLite scan each per file, not per
read.

Kept for the last two files asked about (a handful of entries each, the largest an array of row
numbers), and only while a file is the same: its path, device, inode, size, modification and
change times, its SQLite header's change counters, and those of a ``-wal`` / ``-journal`` beside
it (the reads themselves run inside a read transaction, so nothing commits under one).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

#: Entries kept per file (least recently used go first), and files kept.
_MAX_ENTRIES = 32
_MAX_FILES = 2

#: file key -> what -> value; the lock guards the dictionaries only (values are computed outside
#: it, and stored under the key the file had before and after they were computed, so that
#: threads reading different files at once never see each other's)
_files: OrderedDict[tuple[Hashable, ...], OrderedDict[Hashable, Any]] = OrderedDict()
_lock = threading.Lock()


def file_key(path: Path) -> tuple[Hashable, ...] | None:
    """What identifies the file's current content well enough to reuse what was read of it;
    None when it cannot be had (then nothing is kept)."""
    try:
        st = os.stat(path)
        with open(path, "rb") as fh:
            head = fh.read(100)
    except OSError:
        return None
    side: list[tuple[int, int, int] | None] = []
    for suffix in ("-wal", "-journal"):
        try:
            s = os.stat(f"{path}{suffix}")
        except OSError:
            side.append(None)
        else:
            side.append((s.st_ino, s.st_size, s.st_mtime_ns))
    return (
        os.path.realpath(path),
        st.st_dev,
        st.st_ino,
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
        head[24:28] + head[92:96],
        tuple(side),
    )


def remembered(path: Path, what: Hashable, compute: Callable[[], T]) -> T:
    """``compute()``, or what it gave for ``what`` on this same file before. Nothing is kept
    when it raises, or when the file changed while it ran. Arrays are kept read-only."""
    key = file_key(path)
    if key is None:
        return compute()
    with _lock:
        facts = _files.get(key)
        if facts is not None and what in facts:
            _files.move_to_end(key)
            facts.move_to_end(what)
            value: T = facts[what]
            return value
    value = compute()
    if file_key(path) != key:
        return value
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    with _lock:
        facts = _files.setdefault(key, OrderedDict())
        _files.move_to_end(key)
        facts[what] = value
        while len(facts) > _MAX_ENTRIES:
            facts.popitem(last=False)
        while len(_files) > _MAX_FILES:
            _files.popitem(last=False)
    return value


def recall(path: Path, what: Hashable) -> Any:
    """What :func:`remembered` kept for ``what`` on this same file, or None."""
    key = file_key(path)
    if key is None:
        return None
    with _lock:
        facts = _files.get(key)
        return None if facts is None else facts.get(what)


def forget() -> None:
    """Drop everything kept (tests)."""
    with _lock:
        _files.clear()
