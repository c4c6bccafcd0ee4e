"""CSV output: the step rows (one per rank and step), same fields as the JSON ``steps``."""

from __future__ import annotations

import csv
import io
from typing import TYPE_CHECKING

from .json_report import step_records

if TYPE_CHECKING:
    from ..run.results import Analysis


def render(analysis: Analysis) -> str:
    rows = step_records(analysis)
    if not rows:
        return ""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0].keys()), lineterminator="\n")
    writer.writeheader()
    for rec in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in rec.items()})
    return buf.getvalue()
