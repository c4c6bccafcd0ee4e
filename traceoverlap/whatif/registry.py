"""The what-if scenarios (docs/whatif.md §3): one registry, one entry per scenario.

A :class:`Scenario` holds its name, the parameter it takes after a colon (none, a rank, a
collective family or a factor: :class:`Param`), a line of help, the arguments it runs with when
no scenario is asked (``defaults``), what it does to the replay's parameters (``apply``), what
the report says it changed (``changed``) and what it does with the observed slack (``slack``). The parser, the "unknown scenario" error, the help of
``traceoverlap whatif`` and the default list all read :data:`SCENARIOS`, in its order: the order
scenarios are listed and run in. A new scenario is one entry in :data:`BUILT_IN`, or one
:func:`register` call from anywhere::

    from traceoverlap.whatif.registry import Changed, Scenario, register, run_ranks

    register(Scenario(
        "no-memory",
        help="memory copies take no time",
        apply=lambda g, p, arg, tax: ...,            # -> traceoverlap.whatif.replay.Params
        changed=lambda g, arg: Changed("memory copies take no time", run_ranks(g)),
    ))

This module loads no numpy, so ``traceoverlap whatif --help`` lists the scenarios at once: the
built-in transforms (:mod:`traceoverlap.whatif.transforms`) load when a scenario runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from ..core.errors import UsageError
from ..core.vocab import Family

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from .graph import RunGraph
    from .replay import Params

    I64 = npt.NDArray[np.int64]
    #: (run graph, its observed parameters, the argument after the colon ("" for a scenario
    #: without parameter), the overlap tax per node (ns)) -> the scenario's parameters
    Apply = Callable[[RunGraph, Params, str, I64], Params]
    #: (run graph, argument) -> what the report says changed
    Describe = Callable[[RunGraph, str], "Changed"]
    #: run graph -> the arguments to run with when no scenario is asked
    Defaults = Callable[[RunGraph], Sequence[str]]
    #: (run graph, the scenario as asked, its argument): raises UsageError where the run has no such target
    Check = Callable[[RunGraph, str, str], None]


class Changed(NamedTuple):
    """What a scenario changed, as the report says it: a phrase, and the ranks and collective
    families it touches."""

    text: str
    ranks: tuple[int, ...] = ()
    collectives: tuple[str, ...] = ()


def run_ranks(g: RunGraph) -> tuple[int, ...]:
    """The run's ranks, ascending."""
    return tuple(sorted({int(r) for r in g.unit_rank.tolist()}))


def run_families(g: RunGraph) -> tuple[str, ...]:
    """The run's collective families, in the graph's order."""
    return tuple(f for f in g.families if f)


# --- parameters ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """What a scenario takes after ``NAME:``: ``kind`` (rank, family, factor), shown as
    ``metavar``, ``pattern`` for the whole argument (else the name is an unknown scenario), and
    ``check`` against the run (its ranks, its families; a factor > 0)."""

    kind: str
    metavar: str
    pattern: str
    check: Check


def _check_rank(g: RunGraph, name: str, arg: str) -> None:
    ranks = list(run_ranks(g))
    if int(arg) not in ranks:
        raise UsageError(f"scenario {name}: no such rank in the input (ranks: {ranks})")


def _check_family(g: RunGraph, name: str, arg: str) -> None:
    fams = run_families(g)
    if arg.lower() not in [f.lower() for f in fams]:
        raise UsageError(
            f"scenario {name}: no such collective family in the run "
            f"(families: {', '.join(fams) or 'none'})"
        )


def _check_factor(g: RunGraph, name: str, arg: str) -> None:
    if float(arg) <= 0:
        raise UsageError(f"scenario {name}: the factor must be > 0")


#: a rank of the run (``fix-rank:3``)
RANK = Param("rank", "R", r"\d+", _check_rank)
#: a collective family of the run, any case (``hide:AllReduce``)
FAMILY = Param("family", "FAMILY", r"\S+", _check_family)
#: a factor > 0 (``comm-speed:2``, ``comm-speed:1.5``)
FACTOR = Param("factor", "F", r"\d+(\.\d+)?", _check_factor)


# --- the scenario -------------------------------------------------------------------------------


def never(g: RunGraph) -> tuple[str, ...]:
    """Not in the default list: run only when asked."""
    return ()


def always(g: RunGraph) -> tuple[str, ...]:
    """In the default list of every run, once (a scenario without parameter)."""
    return ("",)


@dataclass(frozen=True)
class Scenario:
    """One what-if scenario (see the module docstring): ``name``, ``help`` (one line for
    ``whatif --help``), ``apply`` (-> the scenario's replay parameters), ``changed`` (-> what the
    report says), ``param`` (None: the name alone), ``defaults`` (the arguments it runs with when
    no scenario is asked: ``("",)`` once without argument, ``()`` only when asked)."""

    name: str
    help: str
    apply: Apply
    changed: Describe
    param: Param | None = None
    defaults: Defaults = never
    #: what it does with the observed slack (delays the graph does not explain, docs/whatif.md
    #: §3): ``kept``, ``peers`` (the peers' median at each position), ``zeroed-host`` (on host
    #: lanes without communication) or ``zeroed``
    slack: str = "kept"

    @property
    def spelling(self) -> str:
        """How it is asked for: ``no-straggler``, ``fix-rank:R``."""
        return self.name if self.param is None else f"{self.name}:{self.param.metavar}"

    def asked(self, arg: str) -> str:
        """The scenario's name as asked with ``arg``: ``fix-rank:3``."""
        return self.name if self.param is None else f"{self.name}:{arg}"


#: Every scenario by name, in the order they are listed and run.
SCENARIOS: dict[str, Scenario] = {}

_NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]*")


def register(scenario: Scenario) -> Scenario:
    """Add ``scenario`` after the others (a name of lower-case letters, digits and dashes, not
    taken)."""
    if not _NAME_RE.fullmatch(scenario.name):
        raise ValueError(f"scenario name {scenario.name!r}: use lower-case letters, digits and -")
    if scenario.name in SCENARIOS:
        raise ValueError(f"scenario {scenario.name!r} is registered already")
    SCENARIOS[scenario.name] = scenario
    return scenario


def spellings() -> list[str]:
    """Every scenario as it is asked for, in registry order."""
    return [s.spelling for s in SCENARIOS.values()]


def option_help() -> str:
    """The help of ``whatif --scenario``."""
    return f"{', '.join(spellings())} (repeatable; default: every one that applies)."


def unknown_scenario(name: str) -> UsageError:
    s = spellings()
    listed = f"{', '.join(s[:-1])} or {s[-1]}" if len(s) > 1 else "".join(s)
    return UsageError(f"unknown scenario {name!r}: use {listed}")


def parse(name: str) -> tuple[Scenario, str]:
    """The scenario ``name`` asks for and its argument ("" without); an unknown name (or an
    argument its parameter does not take) is a UsageError listing every scenario."""
    head, colon, arg = name.partition(":")
    s = SCENARIOS.get(head)
    if s is not None:
        if s.param is None and not colon:
            return s, ""
        if s.param is not None and colon and re.fullmatch(s.param.pattern, arg):
            return s, arg
    raise unknown_scenario(name)


def check(g: RunGraph, name: str) -> tuple[Scenario, str]:
    """:func:`parse`, and the argument checked against the run ``g``."""
    s, arg = parse(name)
    if s.param is not None:
        s.param.check(g, name, arg)
    return s, arg


def default_names(g: RunGraph) -> list[str]:
    """The scenarios run when none is asked: each entry's ``defaults`` on ``g``, in order."""
    return [s.asked(arg) for s in SCENARIOS.values() for arg in s.defaults(g)]


# --- the built-in scenarios ---------------------------------------------------------------------


def _identity(g: RunGraph, p: Params, arg: str, tax: I64) -> Params:
    return p


def _no_straggler(g: RunGraph, p: Params, arg: str, tax: I64) -> Params:
    from .transforms import every_node, like_peers

    return like_peers(g, p, every_node(g), "all")


def _ideal(g: RunGraph, p: Params, arg: str, tax: I64) -> Params:
    from .transforms import ideal

    return ideal(g, p)


def _fix_rank(g: RunGraph, p: Params, arg: str, tax: I64) -> Params:
    from .transforms import like_peers, rank_nodes

    return like_peers(g, p, rank_nodes(g, int(arg)), "others")


def _hide(g: RunGraph, p: Params, arg: str, tax: I64) -> Params:
    from .transforms import comm_scaled, family_nodes

    return comm_scaled(g, p, family_nodes(g, arg), float("inf"))


def _comm_speed(g: RunGraph, p: Params, arg: str, tax: I64) -> Params:
    from .transforms import comm_scaled, every_node

    return comm_scaled(g, p, every_node(g), float(arg))


def _no_host_gaps(g: RunGraph, p: Params, arg: str, tax: I64) -> Params:
    from .transforms import no_host_gaps

    return no_host_gaps(g, p)


def _no_overlap_tax(g: RunGraph, p: Params, arg: str, tax: I64) -> Params:
    from .transforms import less

    return less(p, tax)


def _several_ranks(g: RunGraph) -> tuple[str, ...]:
    return ("",) if len(run_ranks(g)) >= 2 else ()


def _hidable(g: RunGraph) -> tuple[str, ...]:
    return tuple(f for f in run_families(g) if f != Family.OTHER)


#: The scenarios of docs/whatif.md §3, in the order they are listed and run.
BUILT_IN = (
    Scenario(
        "replay",
        help="nothing changed: the identity replay (its error against the trace is reported)",
        apply=_identity,
        changed=lambda g, arg: Changed("nothing (identity)"),
        defaults=always,
    ),
    Scenario(
        "no-straggler",
        help="every rank runs like the median rank at each position (runs of 2+ ranks)",
        apply=_no_straggler,
        changed=lambda g, arg: Changed(
            "every rank runs like the median rank at each position", run_ranks(g)
        ),
        defaults=_several_ranks,
        slack="peers",
    ),
    Scenario(
        "ideal",
        help="the published straggler-free run: compute at the mean of its op over ranks and "
        "steps, communication at its median, no launch delays (runs of 2+ ranks)",
        apply=_ideal,
        changed=lambda g, arg: Changed(
            "compute at the mean of its op, communication at its median, no launch delays",
            run_ranks(g),
        ),
        defaults=_several_ranks,
        slack="zeroed",
    ),
    Scenario(
        "fix-rank",
        param=RANK,
        help="rank R runs like the median of its peers (whatif adds one row per rank that matters)",
        apply=_fix_rank,
        changed=lambda g, arg: Changed(
            f"rank {int(arg)} runs like the median of its peers", (int(arg),)
        ),
        slack="peers",
    ),
    Scenario(
        "hide",
        param=FAMILY,
        help="that collective family's transfers delay nothing (perfect overlap; by default "
        "one per family)",
        apply=_hide,
        changed=lambda g, arg: Changed(f"{arg} transfers delay nothing", run_ranks(g), (arg,)),
        defaults=_hidable,
    ),
    Scenario(
        "comm-speed",
        param=FACTOR,
        help="every transfer F times faster (by default 2)",
        apply=_comm_speed,
        changed=lambda g, arg: Changed(
            f"every transfer {arg}x faster", run_ranks(g), run_families(g)
        ),
        defaults=lambda g: ("2",),
    ),
    Scenario(
        "no-host-gaps",
        help="host gaps between launches / ops set to 0 (an upper bound for CUDA graphs)",
        apply=_no_host_gaps,
        changed=lambda g, arg: Changed("host gaps between launches / ops set to 0", run_ranks(g)),
        defaults=always,
        slack="zeroed-host",
    ),
    Scenario(
        "no-overlap-tax",
        help="compute beside communication at its uncontended speed (the overlap tax)",
        apply=_no_overlap_tax,
        changed=lambda g, arg: Changed(
            "compute beside communication at its uncontended speed",
            run_ranks(g),
            run_families(g),
        ),
        defaults=always,
    ),
)

for _scenario in BUILT_IN:
    register(_scenario)
