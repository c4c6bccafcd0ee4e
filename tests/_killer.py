"""A stand-in per-file task for worker-death tests: the worker reading a file whose name holds
"oom" dies by SIGKILL, as the kernel's out-of-memory killer does."""

from __future__ import annotations

import os
import signal


def task(name: str) -> str:
    if "oom" in os.path.basename(name):
        os.kill(os.getpid(), signal.SIGKILL)
    return f"ok {os.path.basename(name)}"


def log_level(name: str) -> str:
    """Where it runs (a Dask worker): the level distributed's loggers were configured with, and
    the environment variable that configured it."""
    import logging

    import distributed  # noqa: F401 - configures logging from Dask's config on import

    level = logging.getLogger("distributed.core").getEffectiveLevel()
    return f"{level} {os.environ.get('DASK_LOGGING__DISTRIBUTED')}"
