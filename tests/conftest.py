"""Shared test configuration: where the real traces live, the ``slow`` marker, and how many
random examples the property tests try.

``python -m pytest`` runs the fast loop (CONTRIBUTING.md gives its cost in CPU seconds, and how
to measure it); ``python -m pytest --runslow`` (what ``.ci/run`` runs) adds the tests marked
``slow`` (the ones that start PyTorch workloads, Nsight Systems, a Dask cluster or a browser) and
runs every property, oracle and scanner fuzz test with its full number of examples
(:func:`examples`; the fast loop tries a tenth) and every "each fixture" test on every fixture
(:func:`sample`; the fast loop takes 6, spread over the list). ``TRACEOVERLAP_HYPOTHESIS=ci`` asks for the full
numbers without the slow tests, ``=fast`` for the small ones under ``--runslow``;
``TRACEOVERLAP_FUZZ_EXAMPLES=5000`` sets every fuzz test's number (a campaign).

Real GPU traces that nobody on this project wrote are read from ``$TRACEOVERLAP_REAL_TRACES``
(default ``../shared/real-traces`` beside the checkout); tests that need them skip, with the
reason, when the folder is absent.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

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


#: Whether the property tests run their full number of examples (set in pytest_configure, before
#: the test modules are imported and their ``@settings`` evaluated).
_FULL_EXAMPLES = False


def examples(full: int) -> int:
    """A property test's ``max_examples``: ``full`` in CI (``--runslow``, or
    ``TRACEOVERLAP_HYPOTHESIS=ci``), a tenth of it (at least 10) in the fast loop;
    ``TRACEOVERLAP_FUZZ_EXAMPLES`` when set, always."""
    campaign = int(os.environ.get("TRACEOVERLAP_FUZZ_EXAMPLES", "0") or 0)
    if campaign:
        return campaign
    return full if _FULL_EXAMPLES else max(10, full // 10)


def sample(items: Iterable[T], k: int = 6) -> list[T]:
    """A test's parameters over every fixture: all of them in CI (as :func:`examples`), ``k``
    of them spread evenly (the first and the last among them) in the fast loop."""
    every = list(items)
    if _FULL_EXAMPLES or len(every) <= k:
        return every
    step = (len(every) - 1) / (k - 1)
    return [every[round(i * step)] for i in range(k)]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--runslow",
        action="store_true",
        default=False,
        help="also run the tests marked slow (PyTorch workloads, nsys, browser)",
    )


def pytest_configure(config: pytest.Config) -> None:
    global _FULL_EXAMPLES
    config.addinivalue_line(
        "markers",
        "slow: starts PyTorch workloads, Nsight Systems, a Dask cluster or a browser (--runslow)",
    )
    mode = os.environ.get("TRACEOVERLAP_HYPOTHESIS", "")
    _FULL_EXAMPLES = mode == "ci" or (mode != "fast" and bool(config.getoption("--runslow")))
    # properties that do not set max_examples themselves: hypothesis's 100 in CI, 10 here
    from hypothesis import settings

    settings.register_profile("traceoverlap-ci", max_examples=100)
    settings.register_profile("traceoverlap-fast", max_examples=10)
    settings.load_profile("traceoverlap-ci" if _FULL_EXAMPLES else "traceoverlap-fast")


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


@pytest.fixture(autouse=True)
def _no_inherited_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Text output off a terminal wraps at ``$COLUMNS`` when set, else 80: a shell that exports
    its width must not change what the tests read (a test that wants a width sets it)."""
    monkeypatch.delenv("COLUMNS", raising=False)
