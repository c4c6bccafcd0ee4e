"""Type stub of the page decoder's C loops (_npage.c): see its source for the arguments."""

from collections.abc import Sequence
from typing import Any

def decode(
    mm: Any,
    page_size: int,
    usable: int,
    leaves: Any,
    ncell: Any,
    pick: Any,
    ncol: int,
    rowid: Any,
    held: Any,
    ints: Sequence[tuple[int, Any, Any]],
    texts: Sequence[tuple[int, Any, Any]],
    /,
) -> str | None: ...
def texts(mm: Any, offsets: Any, lengths: Any, null: Any, /) -> tuple[bytes, list[str], int]: ...
def texts_memo(
    mm: Any,
    offsets: Any,
    lengths: Any,
    null: Any,
    memo: Memo | None,
    needles: tuple[bytes, ...] | None = None,
    /,
) -> tuple[bytes, list[str | None], int, bytes, int]: ...

class Memo:
    def __init__(self, limit: int) -> None: ...
    def __len__(self) -> int: ...
    def settle(self, verdicts: Any, /) -> None: ...

def containing(mm: Any, serial: Any, offset: Any, needle: bytes, /) -> bytes: ...
