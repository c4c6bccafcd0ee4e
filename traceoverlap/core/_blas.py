"""numpy's OpenBLAS thread pool, which the command does not need.

numpy's wheels load OpenBLAS at import, and OpenBLAS starts one thread per core then: measured
~0.05 s CPU of the command on this 2-core machine (and it grows with the cores of a cluster
node, in each ``-j`` worker). The analysis does no linear algebra, so the command asks for one
thread before numpy is imported, unless the user set the variable. Programs the command starts
for the user (``profile``'s workloads, which may use BLAS through PyTorch) get the environment
as the user had it.
"""

from __future__ import annotations

import os
import sys

VAR = "OPENBLAS_NUM_THREADS"
_set_here = False


def one_thread() -> None:
    """Ask OpenBLAS for one thread, if numpy is not loaded yet and the user did not choose."""
    global _set_here
    if "numpy" in sys.modules or VAR in os.environ:
        return
    os.environ[VAR] = "1"
    _set_here = True


def user_env() -> dict[str, str] | None:
    """The environment for a program started for the user: as the user had it (``None``: ours
    is theirs)."""
    if not _set_here:
        return None
    env = dict(os.environ)
    env.pop(VAR, None)
    return env
