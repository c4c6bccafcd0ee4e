"""Shared test configuration: where the real traces live, and the ``slow`` marker.

``python -m pytest`` runs the fast loop (under a minute); ``python -m pytest --runslow`` (what
``.ci/run`` runs) adds the tests marked ``slow``: the ones that start PyTorch workloads, Nsight
Systems or a browser.

Real GPU traces that nobody on this project wrote are read from ``$TRACEOVERLAP_REAL_TRACES``
(default ``../shared/real-traces`` beside the checkout); tests that need them skip, with the
reason, when the folder is absent.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
WORKLOAD_FIXTURES = FIXTURES / "workloads"
REAL_TRACES = Path(
    os.environ.get("TRACEOVERLAP_REAL_TRACES", str(REPO.parent / "shared" / "real-traces"))
)


def real_trace(relative: str) -> Path:
    """A path under the real-traces folder; the calling test is skipped when it is absent."""
    path = REAL_TRACES / relative
    if not path.exists():
        pytest.skip(f"real trace not present: {path} (set TRACEOVERLAP_REAL_TRACES)")
    return path


def one_error_line(res) -> str:  # noqa: ANN001
    """The CLI's answer to bad input: exit 2, one line ``traceoverlap: error: ...``, no
    traceback. Returns that line."""
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceoverlap: error:"), res.output
    assert "Traceback" not in res.output
    return lines[0]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--runslow",
        action="store_true",
        default=False,
        help="also run the tests marked slow (PyTorch workloads, nsys, browser)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: starts PyTorch workloads, Nsight Systems or a browser (--runslow)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow"):
        return
    keep, drop = [], []
    for item in items:
        (drop if "slow" in item.keywords else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def name_candidates(test: Any, names: list[str]) -> tuple[Any, str]:
    """A NameTest's block prefilter over ``names`` as the nsys reader calls it (the texts joined
    with NUL, the end of each): (its candidates, the joined text)."""
    import numpy as np

    joined = "\x00".join(names) + "\x00"
    ends = np.cumsum([len(n) + 1 for n in names]) - 1
    return test.candidates(joined, ends), joined
