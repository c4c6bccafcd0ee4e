"""Analysis options, in one place: thresholds, step selection, classification patterns, config.

The CLI, the config file and the Python API all end up in one :class:`AnalysisOptions`; every
value is validated here, so a wrong type or an out-of-range number gets the same clear error
whichever way it came in (the error names the option or config key, never a CLI flag).

Config file (TOML)::

    [classify]
    comm_patterns = ["AllGatherKernel", "^my_custom_reduce"]   # extra communication names
    [steps]
    step_regex = "^train_step"
    [thresholds]
    lost_ratio = 0.10    # compute-bound below this share of the step not spent computing
    straggler_ratio = 0.05  # no straggler named below this share of step time spent waiting
"""

from __future__ import annotations

import math
import os
import re
import stat
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import UsageError
from .vocab import DEFAULT_STEP_REGEX, LOST_RATIO, STEP_RE, STRAGGLER_RATIO, step_number

if TYPE_CHECKING:
    from .rules import Rules


@dataclass(frozen=True)
class Thresholds:
    """Verdict thresholds, as shares of the step (0-1).

    ``lost_ratio``: a step is ``compute-bound`` when the time the device was not computing
    (``step - compute_only - overlap``) is below this share of the step (diagnosis.md §2).
    ``straggler_ratio``: a rank is named the straggler only when the exposed waiting that traces
    back to it is at least this share of the run's step time (diagnosis.md §14).
    """

    lost_ratio: float = LOST_RATIO
    straggler_ratio: float = STRAGGLER_RATIO

    def __post_init__(self) -> None:
        for name in ("lost_ratio", "straggler_ratio"):
            value = getattr(self, name)
            if not _is_ratio(value):
                raise UsageError(f"{name}: expected a number between 0 and 1, got {value!r}")


def _is_ratio(value: Any) -> bool:
    """A number in [0, 1]: not a bool, not NaN or infinite."""
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and 0 <= value <= 1
    )


@dataclass(frozen=True)
class StepSelection:
    """Which step numbers to analyse: ``3-7``, ``3,5``, ``1010-`` (from 1010 on), ``-5``.

    ``ranges`` are inclusive ``(lo, hi)`` pairs, ``None`` for an open end. A label matches by its
    number (``ProfilerStep#5`` -> 5; a repeated number ``5#2`` -> 5; ordinals for unnumbered
    markers); the single window ``all`` of an unmarked trace never matches.
    """

    ranges: tuple[tuple[int | None, int | None], ...]
    text: str

    @classmethod
    def parse(cls, spec: str) -> StepSelection:
        ranges: list[tuple[int | None, int | None]] = []
        for part in spec.split(","):
            m = re.fullmatch(r"\s*(\d+)?\s*(-)?\s*(\d+)?\s*", part)
            if not m or not (m.group(1) or m.group(3)) or (m.group(3) and not m.group(2)):
                raise UsageError(
                    f"steps {spec!r}: expected N, N-M, N- or -M, comma-separated (e.g. 3-7 or 3,5)"
                )
            lo = int(m.group(1)) if m.group(1) else None
            hi = int(m.group(3)) if m.group(3) else (lo if not m.group(2) else None)
            if lo is not None and hi is not None and hi < lo:
                raise UsageError(
                    f"steps {spec!r}: the range is empty ({part.strip()}: {hi} < {lo})"
                )
            ranges.append((lo, hi))
        return cls(tuple(ranges), spec.strip())

    def matches(self, number: int | None) -> bool:
        if number is None:
            return False
        return any(
            (lo is None or number >= lo) and (hi is None or number <= hi) for lo, hi in self.ranges
        )


@dataclass(frozen=True)
class AnalysisOptions:
    """Everything an analysis depends on besides its inputs (see :func:`traceoverlap.analyze`).

    ``step_re``: the step marker regex, validated and compiled here, once; the map's units use
    it as it is (:data:`~traceoverlap.core.vocab.STEP_RE` when ``step_regex`` is None)."""

    step_regex: str | None = None
    steps: StepSelection | None = None
    ranks: tuple[int, ...] | None = None
    comm_patterns: tuple[str, ...] = ()
    thresholds: Thresholds = field(default_factory=Thresholds)
    step_re: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        step_re = STEP_RE
        if self.step_regex is not None:
            if not isinstance(self.step_regex, str):
                raise UsageError(f"step_regex: expected a regex string, got {self.step_regex!r}")
            step_re = compile_regex(self.step_regex, "step_regex")
        object.__setattr__(self, "step_re", step_re)  # frozen: set once, here
        if isinstance(self.comm_patterns, str) or not all(
            isinstance(p, str) for p in self.comm_patterns
        ):
            raise UsageError(
                f"comm_patterns: expected a list of regexes, got {self.comm_patterns!r}"
            )
        for p in self.comm_patterns:
            compile_regex(p, "comm_patterns")
        if self.ranks is not None and not all(
            isinstance(r, int) and not isinstance(r, bool) for r in self.ranks
        ):
            raise UsageError(f"ranks: expected integers, got {self.ranks!r}")

    @property
    def step_pattern(self) -> str:
        return self.step_regex or DEFAULT_STEP_REGEX


def compile_regex(pattern: str, what: str) -> re.Pattern[str]:
    """``re.compile`` with an error that names where the pattern came from."""
    shown = repr(pattern) if len(pattern) <= 80 else f"{pattern[:77]!r}... ({len(pattern):,} chars)"
    if not pattern:
        raise UsageError(f"{what}: an empty regex matches every name; give a pattern")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"{what}: {shown} is not a valid regex ({exc})") from None
    except (RecursionError, OverflowError):
        raise UsageError(f"{what}: {shown} is nested too deeply to compile") from None


def build_options(
    *,
    step_regex: str | None = None,
    steps: str | StepSelection | None = None,
    ranks: Iterable[int] | None = None,
    comm_patterns: Iterable[str] = (),
    thresholds: Thresholds | None = None,
    config: Mapping[str, Any] | None = None,
) -> AnalysisOptions:
    """Merge explicit values over a validated config (:func:`load_config`): explicit values win,
    config comm patterns come first and explicit ones are added."""
    cfg = config or {}
    if isinstance(comm_patterns, str):
        raise UsageError(f"comm_patterns: expected a list of regexes, got {comm_patterns!r}")
    selection = StepSelection.parse(steps) if isinstance(steps, str) else steps
    return AnalysisOptions(
        step_regex=step_regex if step_regex is not None else cfg.get("step_regex"),
        steps=selection,
        ranks=tuple(sorted(set(ranks))) if ranks is not None else None,
        comm_patterns=tuple(cfg.get("comm_patterns", ())) + tuple(comm_patterns),
        thresholds=thresholds
        or Thresholds(
            lost_ratio=cfg.get("lost_ratio", LOST_RATIO),
            straggler_ratio=cfg.get("straggler_ratio", STRAGGLER_RATIO),
        ),
    )


@dataclass(frozen=True)
class AnalyzeOptions:
    """What :func:`traceoverlap.analyze` takes besides its input; every field has a default.

    ``step_regex``: the step marker regex (default :data:`DEFAULT_STEP_REGEX`); ``steps``:
    ``"3-7"``, ``"3,5"``, ``"1010-"`` or a :class:`StepSelection`; ``ranks``: only these ranks
    are shown (every rank given is still matched); ``comm_patterns``: extra regexes that count as
    communication; ``thresholds``: verdict thresholds; ``config``: a validated config
    (:func:`load_config`; the fields above win over it); ``rules``: classification rules
    (default ``Rules()``); ``jobs``: parallel map processes; ``scheduler``: ``"local"`` or a Dask
    scheduler address; ``graph``: also build the what-if's run graph (docs/whatif.md §1) from the
    same read (``Analysis.unit_graphs``); past ``graph_max_nodes`` nodes it is left out
    (``Analysis.run_graph_nodes`` says how many) and the map's results stop carrying graphs.
    """

    step_regex: str | None = None
    steps: str | StepSelection | None = None
    ranks: Iterable[int] | None = None
    comm_patterns: Iterable[str] = ()
    thresholds: Thresholds | None = None
    config: Mapping[str, Any] | None = None
    rules: Rules | None = None
    jobs: int | None = None
    scheduler: str | None = None
    graph: bool = False
    graph_max_nodes: int | None = None

    def __post_init__(self) -> None:
        # lists and generators become tuples: the options can be reused (and hashed); a string
        # is left for build_options to refuse with its clear error
        for name in ("ranks", "comm_patterns"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str | tuple):
                object.__setattr__(self, name, tuple(value))

    def analysis_options(self) -> AnalysisOptions:
        """The validated :class:`AnalysisOptions` the analysis runs with."""
        return build_options(
            step_regex=self.step_regex,
            steps=self.steps,
            ranks=self.ranks,
            comm_patterns=self.comm_patterns,
            thresholds=self.thresholds,
            config=self.config,
        )


#: section -> key -> what its value must be (checked by :func:`_validate`)
_CONFIG_KEYS: dict[str, dict[str, str]] = {
    "classify": {"comm_patterns": "a list of regex strings"},
    "steps": {"step_regex": "a regex string"},
    "thresholds": {
        "lost_ratio": "a number between 0 and 1",
        "straggler_ratio": "a number between 0 and 1",
    },
}
_RENAMED = {
    ("thresholds", "exposed_ratio"): "thresholds.lost_ratio (docs/diagnosis.md §2)",
    ("thresholds", "idle_ratio"): "thresholds.lost_ratio (docs/diagnosis.md §2)",
}


#: A config file is a few lines; anything larger is refused before it is read (a huge or sparse
#: file would otherwise be read whole, and run out of memory in the trace's name).
CONFIG_MAX_BYTES = 1 << 20
#: Characters of a value, key or section name an error echoes (the rest is counted).
_SHOWN_CHARS = 80


def _shown(value: Any) -> str:
    """``value`` for an error line: its repr (so a newline or an escape sequence stays escaped
    and on the line), with nested containers and long strings elided to about
    :data:`_SHOWN_CHARS` characters, and the size of what was cut."""
    import reprlib

    r = reprlib.Repr()
    r.maxlevel, r.maxstring, r.maxother, r.maxlist, r.maxdict = 3, _SHOWN_CHARS, _SHOWN_CHARS, 6, 6
    text = r.repr(value)
    if len(text) > _SHOWN_CHARS:
        text = text[: _SHOWN_CHARS - 3] + "..."
    if isinstance(value, str) and len(value) > _SHOWN_CHARS - 10:
        text += f" ({len(value):,} chars)"
    elif isinstance(value, (list, dict)) and len(value) > 6:
        text += f" ({len(value):,} items)"
    return text


def _name(name: str) -> str:
    """A config key or section name for an error line: as written when it is a plain bare key,
    else :func:`_shown` (quoted, escaped, shortened)."""
    return name if re.fullmatch(r"[A-Za-z0-9_-]{1,40}", name) else _shown(name)


def load_config(path: str | Path) -> dict[str, Any]:
    """Read and validate a TOML config file; returns flat keys (``comm_patterns``, ``step_regex``,
    ``lost_ratio``, ``straggler_ratio``). Unknown sections or keys and values of the wrong type are errors naming the
    file and the key."""
    if sys.version_info >= (3, 11):  # imported here: only a run with a config file needs it
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    p = Path(path)
    try:
        data = tomllib.loads(_config_text(p))
    except FileNotFoundError:
        raise UsageError(f"{p}: config file not found") from None
    except IsADirectoryError:
        raise UsageError(f"{p}: is a folder, not a config file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(
            f"{p}: not valid TOML ({exc}); see docs/cli.md 'Configuration file'"
        ) from None
    except RecursionError:
        raise UsageError(
            f"{p}: not a config file (values nested too deeply to read); "
            "see docs/cli.md 'Configuration file'"
        ) from None
    except OSError as exc:
        raise UsageError(f"{p}: cannot read the config file ({exc.strerror or exc})") from None
    out: dict[str, Any] = {}
    for section, values in data.items():
        keys = _CONFIG_KEYS.get(section)
        if keys is None:
            raise UsageError(
                f"{p}: unknown section [{_name(section)}]; expected "
                f"{', '.join(f'[{k}]' for k in _CONFIG_KEYS)}"
            )
        if not isinstance(values, dict):
            raise UsageError(f"{p}: {section} must be a [{section}] table")
        for key, value in values.items():
            if key not in keys:
                renamed = _RENAMED.get((section, key))
                hint = f"; use {renamed}" if renamed else f"; expected {', '.join(keys)}"
                raise UsageError(f"{p}: unknown key {section}.{_name(key)}{hint}")
            out[key] = _validate(p, f"{section}.{key}", keys[key], value)
    return out


def _config_text(p: Path) -> str:
    """The config file's text: a regular file only (a named pipe would block forever), UTF-8 with
    any byte order marks dropped (editors on Windows write one; TOML does not allow it)."""
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError
        if not stat.S_ISREG(mode):
            raise UsageError(f"{p}: not a regular file (a pipe or device); give a TOML file")
        size = os.fstat(fd).st_size
        data = b"" if size > CONFIG_MAX_BYTES else fh.read(CONFIG_MAX_BYTES + 1)
        if size > CONFIG_MAX_BYTES or len(data) > CONFIG_MAX_BYTES:  # or it grew meanwhile
            shown = f"{size / 2**30:.1f} GiB" if size >= 2**30 else f"{size:,} bytes"
            raise UsageError(
                f"{p}: config file of {shown}; a config file is a few lines, at most 1 MiB "
                "(is this the right file?)"
            )
        return data.decode("utf-8").lstrip("\ufeff")


def _validate(p: Path, key: str, expected: str, value: Any) -> Any:
    def bad() -> UsageError:
        return UsageError(f"{p}: {key} must be {expected}, got {_shown(value)}")

    if key == "classify.comm_patterns":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad()
        for v in value:
            compile_regex(v, f"{p}: {key}")
        return list(value)
    if key == "steps.step_regex":
        if not isinstance(value, str):
            raise bad()
        compile_regex(value, f"{p}: {key}")
        return value
    if not _is_ratio(value):
        raise bad()
    return float(value)


def describe_steps(labels: Sequence[object]) -> str:
    """``2-4`` for a contiguous numbered run, else ``2, 5, 9`` (shortened)."""
    nums = [step_number(x) for x in labels]
    if labels and all(n is not None for n in nums) and len(set(nums)) == len(nums):
        ints = sorted(n for n in nums if n is not None)
        if len(ints) > 2 and ints == list(range(ints[0], ints[-1] + 1)):
            return f"{ints[0]}-{ints[-1]}"
    shown = [str(x) for x in labels[:12]]
    return ", ".join(shown) + (f", ... ({len(labels)} in all)" if len(labels) > 12 else "")
