"""Python's cycle collector while the command loads its modules.

Importing pandas and numpy creates ~56 000 container objects, and the collector runs a young
collection every 700 of them and an older one every ten of those, rescanning what the imports
built so far: measured 0.045 s CPU of the 0.24 s that the command's imports cost (on the 2-core
development machine), time that finds nothing to free (module objects live until exit). So
:func:`pause` (called first thing by the command, ``__main__.run``) turns the collector off,
and :func:`resume` turns it back on once the heavy modules are loaded (at the start of an
analysis, a read or a parallel map, whichever comes first), after moving what exists then to the
permanent generation (``gc.freeze``), which later collections no longer traverse. As a library,
nothing pauses, and :func:`resume` does nothing.
"""

from __future__ import annotations

import gc

_paused = False


def pause() -> None:
    """Turn the collector off until :func:`resume`, if it is on."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """Turn the collector back on if :func:`pause` turned it off (the modules loaded so far are
    frozen: never rescanned)."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
