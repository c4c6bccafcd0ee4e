"""Type stub of the C scanner (_kscan.c): see its source for what the tuple holds."""

from typing import Any

def scan(buffer: Any, /) -> tuple[Any, ...] | None: ...
