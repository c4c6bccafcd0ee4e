"""A stand-in per-file task for worker-death tests: the worker reading a file whose name holds
"oom" dies by SIGKILL, as the kernel's out-of-memory killer does."""

from __future__ import annotations

import os
import signal


def task(name: str) -> str:
    if "oom" in os.path.basename(name):
        os.kill(os.getpid(), signal.SIGKILL)
    return f"ok {os.path.basename(name)}"
