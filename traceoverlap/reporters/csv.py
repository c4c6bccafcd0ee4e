"""CSV output: the step rows (one per rank and step), same fields as the JSON ``steps``."""

from __future__ import annotations

import csv
import io
from typing import TYPE_CHECKING

from .json import step_records

if TYPE_CHECKING:
    from ..analysis import Analysis


def render(analysis: Analysis) -> str:
    records = step_records(analysis)
    buf = io.StringIO()
    if not records:
        return ""
    writer = csv.DictWriter(buf, fieldnames=list(records[0].keys()), lineterminator="\n")
    writer.writeheader()
    for rec in records:
        writer.writerow({k: ("" if v is None else v) for k, v in rec.items()})
    return buf.getvalue()
