"""``--fail-if`` gates for CI pipelines: ``"exposed_comm_ratio>0.2"``, ``"overlap_ratio<0.5"``.

A condition is ``METRIC OP NUMBER`` with OP one of ``> >= < <= ==``. It is checked against the
*run* summary (all ranks, all analysed steps):

- ratios are aggregates over the run: ``overlap_ratio`` = total overlap / total comm,
  ``exposed_comm_ratio`` and ``idle_ratio`` = total exposed / idle over total step time,
  ``potential_speedup`` = total step time / total ideal time;
- ``*_ns`` metrics are medians over steps (``step_ns``, ``exposed_comm_ns``, ...), and accept a
  unit suffix: ``exposed_comm_ns>5ms`` (ns, us, ms, s).

Several conditions: repeat ``--fail-if`` or separate them with commas; any one met fails the gate.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..core._lazyre import lazy_compile
from ..core.errors import UsageError
from ..core.schema import NS_METRICS, RATIO_METRICS
from .results import Summary

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    ">": operator.gt,
    "<": operator.lt,
}
_RATIOS = RATIO_METRICS
_UNITS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
_RX = lazy_compile(r"^\s*([a-z_]+)\s*(>=|<=|==|>|<)\s*([0-9.eE+-]+)\s*(ns|us|ms|s)?\s*$")

GATE_METRICS = _RATIOS + NS_METRICS


@dataclass(frozen=True)
class Condition:
    metric: str
    op: str
    value: float
    text: str

    def check(self, run: Summary) -> tuple[bool, float | None]:
        """(met, actual value); a metric that is null (e.g. no comm) never meets the condition."""
        actual = run.aggregate(self.metric) if self.metric in _RATIOS else run.median(self.metric)
        if actual is None:
            return False, None
        return _OPS[self.op](float(actual), self.value), float(actual)


def parse_conditions(specs: Iterable[str]) -> list[Condition]:
    out = []
    for spec in specs:
        if not spec.replace(",", "").strip():
            # an unset $GATE must not switch the CI gate off silently
            raise UsageError(
                "fail-if: empty condition (an unset variable?); expected METRIC OP NUMBER, "
                "e.g. 'exposed_comm_ratio>0.2'"
            )
        for part in spec.split(","):
            if not part.strip():
                continue
            m = _RX.match(part)
            if not m:
                raise UsageError(
                    f"fail-if {part.strip()!r}: expected METRIC OP NUMBER, e.g. 'exposed_comm_ratio>0.2'"
                )
            metric, op, num, unit = m.groups()
            if metric not in GATE_METRICS:
                raise UsageError(
                    f"fail-if {part.strip()!r}: unknown metric {metric!r}; one of {', '.join(GATE_METRICS)}"
                )
            if unit and metric in _RATIOS:
                raise UsageError(f"fail-if {part.strip()!r}: {metric} is a ratio and takes no unit")
            try:
                value = float(num) * _UNITS[unit or "ns"]
                if value != value or value in (float("inf"), float("-inf")):
                    raise ValueError(num)
            except ValueError:
                raise UsageError(f"fail-if {part.strip()!r}: {num!r} is not a number") from None
            out.append(Condition(metric, op, value, part.strip()))
    return out


def failed_conditions(conditions: Iterable[Condition], run: Summary) -> list[str]:
    """Human-readable lines for every condition that is met (= the gate fails)."""
    lines = []
    for c in conditions:
        met, actual = c.check(run)
        if met:
            shown = f"{actual:.4g}" if actual is not None else "null"
            lines.append(f"{c.text} (actual {c.metric} = {shown})")
    return lines
