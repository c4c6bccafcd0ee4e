"""One range in both profilers: NVTX (Nsight Systems) and ``record_function`` (Kineto).

The ``nvtx`` package is used rather than ``torch.cuda.nvtx``, which raises on CPU-only builds of torch;
without Nsight attached an NVTX range costs almost nothing. Ranges go to the default NVTX domain so that
readers matching step ranges by name (``ProfilerStep#N``) need no domain filter.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import nvtx
import torch


@contextlib.contextmanager
def span(name: str, color: str = "blue") -> Iterator[None]:
    """Mark ``name`` as a range in Nsight Systems (NVTX) and in the PyTorch profiler trace."""
    with nvtx.annotate(name, color=color), torch.profiler.record_function(name):
        yield


@contextlib.contextmanager
def nvtx_only(name: str, color: str = "green") -> Iterator[None]:
    """An NVTX-only range: for the step, which Kineto already marks as ``ProfilerStep#N``."""
    with nvtx.annotate(name, color=color):
        yield
