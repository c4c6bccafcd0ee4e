"""The step table the terminal and Markdown reports share: one row per unit and step, the unit
named like the per-rank summaries."""

from __future__ import annotations

from test_runs import _two_gpus_one_process

from traceoverlap import analyze
from traceoverlap.reporters import markdown, text
from traceoverlap.reporters._format import STEP_TABLE, step_table_rows


def test_two_gpus_of_one_process_are_two_named_rows() -> None:
    # rank 0 drives GPUs 0 and 1: two units, named "0:0" and "0:1" like summary.ranks.
    # GPU 0: overlap 10 of comm 20 ns -> 50.0%; GPU 1: 0 of 20 -> 0.0%. Times are ns, so every
    # ms cell rounds to 0.00.
    res = analyze(_two_gpus_one_process())
    rows = list(step_table_rows(res))
    assert [cells[0] for cells, _ in rows] == ["0:0", "0:1"] == sorted(res.summary.ranks)
    assert [cells[STEP_TABLE.index("overlap")] for cells, _ in rows] == ["50.0%", "0.0%"]
    assert all(len(cells) == len(STEP_TABLE) for cells, _ in rows)
    assert all(cells[STEP_TABLE.index("step ms")] == "0.00" for cells, _ in rows)

    md = markdown.render(res).splitlines()
    head = md.index("| " + " | ".join(STEP_TABLE) + " |")
    assert md[head + 1] == "|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---|"
    assert md[head + 2].startswith("| 0:0 | 1 | 0.00 |")
    assert md[head + 3].startswith("| 0:1 | 1 | 0.00 |")

    table = text.render(res, width=100).splitlines()
    body = [line.split() for line in table if line.strip().startswith("0:")]
    assert [b[:2] for b in body] == [["0:0", "1"], ["0:1", "1"]]
    assert [b[8] for b in body] == ["50.0%", "0.0%"]
