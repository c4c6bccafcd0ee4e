"""JSON output: one object with a stable, documented schema (README "JSON schema").

``schema_version`` changes only when a field changes meaning or disappears; new fields may be
added within a version. Times are integer nanoseconds, ratios floats in 0-1 or null.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..metrics import STEP_COLUMNS

if TYPE_CHECKING:
    from ..analysis import Analysis

SCHEMA_VERSION = 1

#: Step-row fields, in output order: the metrics layer's columns.
STEP_FIELDS = STEP_COLUMNS
#: Optional step-row fields added when present (cross-rank split; nsys placement).
OPTIONAL_STEP_FIELDS = ("exposed_wait_ns", "exposed_transfer_ns", "pid", "device")


def clean(value: Any) -> Any:
    """numpy / pandas scalars -> plain JSON values; NaN -> None (never NaN in output)."""
    if value is None:
        return None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    if isinstance(value, bool):
        return value
    if hasattr(value, "item") and not isinstance(value, str):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def step_records(analysis: Analysis) -> list[dict[str, Any]]:
    """The step rows as plain dicts (nsys inputs also carry ``pid`` and ``device``)."""
    df = analysis.steps
    fields = [f for f in STEP_FIELDS if f in df.columns]
    fields += [f for f in OPTIONAL_STEP_FIELDS if f in df.columns]
    placement = {t.rank: (t.pid, t.device) for t in analysis.timeline.traces if t.format == "nsys"}
    records = []
    for row in df[fields].itertuples(index=False, name=None):
        rec = {f: clean(v) for f, v in zip(fields, row, strict=True)}
        if rec["rank"] in placement and "pid" not in rec:
            rec["pid"], rec["device"] = placement[rec["rank"]]
        records.append(rec)
    return records


def to_dict(analysis: Analysis) -> dict[str, Any]:
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "traceoverlap", "version": __version__},
        "traces": [t.to_dict() for t in analysis.timeline.traces],
        "options": {
            "step_regex": analysis.step_regex,
            "thresholds": {
                "exposed_ratio": analysis.thresholds.exposed_ratio,
                "idle_ratio": analysis.thresholds.idle_ratio,
            },
            "comm_patterns": list(analysis.rules.extra_comm),
        },
        "steps": step_records(analysis),
        "summary": clean(analysis.summary),
        "unassigned_gpu_activities": {str(k): v for k, v in sorted(analysis.unassigned.items())},
        "notes": list(analysis.notes),
    }
    if analysis.collectives is not None and hasattr(analysis.collectives, "to_json"):
        out.update(clean(analysis.collectives.to_json()))
    return out


def render(analysis: Analysis) -> str:
    return json.dumps(to_dict(analysis), indent=2, allow_nan=False) + "\n"
