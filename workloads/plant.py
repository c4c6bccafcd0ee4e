"""Which iterations carry a planted cause: the within-run closed loop (docs/whatif.md §5).

A cause planted in every step can only be checked against a second run, and two runs of the same
program on a shared host differ by more than the 20 % a what-if must meet. Planted in alternate
steps only, the clean steps of the same run (same machine, same noise, same minute) are the
measurement that the prediction for the planted steps must meet.

Steps are the loop's iterations ``i`` (``ProfilerStep#i`` in the trace, counting the profiler's
wait and warmup iterations too). A *planted* step is one where ``i % every == 0``:

- ``--slow-every N``: the straggler (``--slow-rank``) sleeps only in planted steps (N = 1, the
  default: every step, as before); with N = 2, the even steps;
- ``--comm alternate``: communication is off in the even steps (planted) and on in the odd ones.

Each planted step opens, first thing inside its step, an empty range named :data:`MARK_SLOW` or
:data:`MARK_COMM_OFF` (both profilers): the analysis ignores it (no time in it), a benchmark
reads it to tell the planted steps from the clean ones. The names avoid the words the analysis
takes for host causes ("straggler", "sleep": ``traceoverlap.rank.unit.HOST_CAUSE_RE``).

No torch here: the test suite checks the rule without starting ranks.
"""

from __future__ import annotations

#: The empty range that opens a step where the straggler sleeps.
MARK_SLOW = "planted_step:slow"
#: The empty range that opens a step where communication is off.
MARK_COMM_OFF = "planted_step:comm_off"
#: ``--comm alternate`` plants communication off every this many steps.
COMM_EVERY = 2


def planted(i: int, every: int) -> bool:
    """Iteration ``i`` carries the cause planted every ``every`` steps (``i % every == 0``)."""
    return every >= 1 and i % every == 0


def sleeps_in(i: int, every: int) -> bool:
    """The straggler sleeps in iteration ``i`` (``--slow-every every``)."""
    return planted(i, every)


def comm_on_in(i: int, mode: str) -> bool:
    """Communication runs in iteration ``i`` under ``--comm mode`` (on, off, alternate)."""
    if mode == "off":
        return False
    if mode == "alternate":
        return not planted(i, COMM_EVERY)
    return True


def marks(i: int, slow_every: int, slowed: bool, comm_mode: str) -> list[str]:
    """The planted-step ranges iteration ``i`` opens: :data:`MARK_SLOW` where a straggler is
    planted (``slowed``) only in some steps (``slow_every`` > 1) and sleeps in this one;
    :data:`MARK_COMM_OFF` where ``--comm alternate`` switches communication off in it. Every
    rank opens the same ones (the sleeper is one rank, the step is planted on all)."""
    out = []
    if slowed and slow_every > 1 and sleeps_in(i, slow_every):
        out.append(MARK_SLOW)
    if comm_mode == "alternate" and not comm_on_in(i, comm_mode):
        out.append(MARK_COMM_OFF)
    return out
