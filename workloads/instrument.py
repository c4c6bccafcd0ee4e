"""One range in both profilers: NVTX (Nsight Systems) and ``record_function`` (Kineto).

The ``nvtx`` package is used rather than ``torch.cuda.nvtx``, which raises on CPU-only builds of torch;
without Nsight attached an NVTX range costs almost nothing. Ranges go to the default NVTX domain so that
readers matching step ranges by name (``ProfilerStep#N``) need no domain filter.

Nsight Systems 2022.4 (Debian's ``nsight-systems``) predates the NVTX payload extension, and
``nvtx`` >= 0.2.12 takes a tool without it for "no tool attached": its domains become no-ops and
the capture has no ranges at all. When a tool is injected (``NVTX_INJECTION64_PATH``, which
``nsys`` sets) but ``nvtx`` says the domain is disabled, a real domain handle is used anyway: the
core NVTX calls (push/pop, start/end, mark) are what every Nsight Systems records.

Communication is marked for Nsight Systems on gloo runs: :func:`comm_begin` opens an NVTX
start/end range named ``gloo:{collective}`` (``gloo:all_reduce``) when a collective is issued, and
:func:`comm_end_when_done` closes it when the collective completes (its future's callback, on the
thread that completes it). Under nsys a CPU (gloo) run has no other record of its communication:
these ranges are it. They are NVTX-only (the PyTorch profiler already records gloo's own work
items), and nothing is done without a tool attached or on NCCL runs (their kernels are the
communication).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from typing import Any

import nvtx
import torch

#: The NVTX range that brackets the profiled steps of a CPU run: ``nsys profile
#: --capture-range=nvtx --nvtx-capture=traceoverlap:capture`` records exactly what is inside it.
CAPTURE_RANGE = "traceoverlap:capture"


def _default_domain() -> Any:
    get = getattr(nvtx, "get_domain", None)
    domain = get(None) if get is not None else None
    if domain is not None and type(domain).__name__ != "DummyDomain":
        return domain
    if not os.environ.get("NVTX_INJECTION64_PATH"):
        return None  # no tool attached: every call below is a no-op
    try:
        from nvtx._lib import lib as _lib

        real = object.__new__(_lib.Domain)
        real.handle = _lib.DomainHandle(None)
        return real
    except (ImportError, AttributeError, TypeError):  # an nvtx without these internals
        return None


_DOMAIN = _default_domain()
#: Whether a tool (Nsight Systems) records the ranges of this process.
ACTIVE = _DOMAIN is not None


@functools.lru_cache(maxsize=4096)
def _attributes(message: str, color: str | None) -> Any:
    return _DOMAIN.get_event_attributes(message=message, color=color)


def mark(message: str) -> None:
    """An NVTX mark (an instant), e.g. ``rank 3`` for readers that take the rank from it."""
    if ACTIVE:
        _DOMAIN.mark(_attributes(message, None))


@contextlib.contextmanager
def _nvtx_range(name: str, color: str | None) -> Iterator[None]:
    if not ACTIVE:
        yield
        return
    _DOMAIN.push_range(_attributes(name, color))
    try:
        yield
    finally:
        _DOMAIN.pop_range()


@contextlib.contextmanager
def span(name: str, color: str = "blue") -> Iterator[None]:
    """Mark ``name`` as a range in Nsight Systems (NVTX) and in the PyTorch profiler trace."""
    with _nvtx_range(name, color), torch.profiler.record_function(name):
        yield


@contextlib.contextmanager
def nvtx_only(name: str, color: str = "green") -> Iterator[None]:
    """An NVTX-only range: for the step, which Kineto already marks as ``ProfilerStep#N``."""
    with _nvtx_range(name, color):
        yield


def marks_comm() -> bool:
    """Whether collectives are marked: under Nsight Systems on CPU (gloo) runs, whose capture has
    no other record of communication (on GPUs the NCCL kernels are the communication)."""
    if not ACTIVE:
        return False
    import torch.distributed as dist

    return dist.is_initialized() and dist.get_backend() == "gloo"


def comm_begin(collective: str) -> int | None:
    """Open the NVTX range of a collective being issued (``gloo:{collective}``)."""
    from . import comm as _comm  # late: comm imports this module

    if not marks_comm() or not _comm.ENABLED:
        return None
    return int(_DOMAIN.start_range(_attributes(f"gloo:{collective}", "orange")))


def comm_end(handle: int | None) -> None:
    """Close a range opened by :func:`comm_begin` (from any thread)."""
    if handle is not None:
        _DOMAIN.end_range(handle)


def comm_end_when_done(work: Any, handle: int | None) -> None:
    """Close ``handle`` when the async collective ``work`` completes (gloo completes a work's
    future on its own thread, right when the collective finishes)."""
    if handle is None:
        return
    work.get_future().then(lambda _done: comm_end(handle))


@contextlib.contextmanager
def comm(collective: str) -> Iterator[None]:
    """A blocking collective: the range is the call."""
    handle = comm_begin(collective)
    try:
        yield
    finally:
        comm_end(handle)
