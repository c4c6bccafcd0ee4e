"""A fast "does any of these regexes match this name?" for millions of names.

The range filter of :mod:`traceoverlap.rank.unit` tests every NVTX text of an export (an
``emit_nvtx`` capture has one unique text per op) against the step, phase and communication
patterns. ``re`` pays about 3 us per name for an unanchored case-insensitive alternation
(``(?i)forward|backward|...``): more than decoding the text. The patterns are split three ways,
each kept exact:

- plain literals (no regex syntax: ``nccl:``): ``literal in name``;
- ``(?i)`` patterns whose body is lowercase ASCII (the built-in phase and wait patterns): the
  body, compiled without the flag, searched in ``name.lower()`` when the name is ASCII (for ASCII
  names ``re.IGNORECASE`` is ASCII case folding, so both agree); the original regex otherwise;
- everything else joined into one alternation (anchored ``^...`` patterns fail at once), or
  tested one by one when they cannot be joined safely.

:class:`NameTest` adds a block prefilter: when every pattern has a literal that any match must
contain, the names of a decoded block (joined by NULs) that contain one are found with C substring
searches, and only those get the per-name test.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

_GLOBAL_FLAGS = re.compile(r"^\(\?([aiLmsux]+)\)")
_META = set(".^$*+?{}[]\\|()")
# one group around the whole pattern, nothing nested: (forward|backward|optimizer)
_GROUP = re.compile(r"\((?!\?)[^()]*\)")


def alternation(patterns: Sequence[str]) -> re.Pattern[str] | None:
    """One regex that matches where any of ``patterns`` does, or None when they cannot be joined
    safely (backreferences, clashing group names, flags that cannot be scoped)."""
    parts = []
    for p in patterns:
        if re.search(r"\\[1-9]|\(\?P=", p):
            return None
        m = _GLOBAL_FLAGS.match(p)
        flags, body = (m.group(1), p[m.end() :]) if m else ("", p)
        parts.append(f"(?{flags}:{body})" if flags else f"(?:{body})")
    try:
        return re.compile("|".join(parts)) if parts else None
    except re.error:
        return None


def _any_search(patterns: Sequence[str]) -> Callable[[str], bool] | None:
    if not patterns:
        return None
    one = alternation(patterns)
    if one is not None:
        search = one.search
        return lambda s: search(s) is not None
    rxs = [re.compile(p) for p in patterns]
    return lambda s: any(rx.search(s) is not None for rx in rxs)


def literals(body: str) -> list[str] | None:
    """The strings a regex made only of alternatives of literal characters, small character
    classes and optional ones matches (``optimi[sz]er|data_?loader`` -> optimiser, optimizer,
    data_loader, dataloader), or None."""
    if _META.difference("|[]?").intersection(body):
        return None
    out: list[str] = []
    for alt in body.split("|"):
        options = [""]
        k = 0
        while k < len(alt):
            if alt[k] == "[":
                close = alt.find("]", k)
                chars = alt[k + 1 : close] if close > k else ""
                if not chars or not chars.isalnum():
                    return None
                k = close + 1
            elif alt[k] in "]?":  # a stray ], or a ? that follows no character (?? too)
                return None
            else:
                chars = alt[k]
                k += 1
            optional = alt[k : k + 1] == "?"
            k += optional
            options = [o + c for o in options for c in chars] + (options if optional else [])
            if len(options) > 64:
                return None
        if "" in options:
            return None  # an empty alternative matches everything: leave it to re
        out.extend(options)
    return out


@dataclass
class _Plan:
    inside: list[str] = field(default_factory=list)  # literals anywhere in the name
    prefixes: list[str] = field(default_factory=list)  # ^literal
    whole: set[str] = field(default_factory=set)  # ^literal$
    folded: list[str] = field(default_factory=list)  # literals in the ASCII-lowered name
    folded_rx: list[str] = field(default_factory=list)  # (?i) lowercase bodies, on it
    folded_full: list[str] = field(default_factory=list)  # the same, for non-ASCII names
    rest: list[str] = field(default_factory=list)

    def add_folded(self, p: str, body: str) -> None:
        lits = literals(body)
        if lits is None:
            self.folded_rx.append(body)
        else:
            self.folded.extend(lits)
        self.folded_full.append(p)

    def add_plain(self, p: str) -> None:
        start, end = p.startswith("^"), p.endswith("$")
        core = p[int(start) : len(p) - int(end)]
        if start and end and _GROUP.fullmatch(core):
            core = core[1:-1]  # ^(a|b)$: the group only scopes the alternation
        # ^a|b is (^a)|(b): only an unanchored or wholly grouped alternation is a set of literals
        grouped = p.startswith("^(") and p.endswith(")$") and _GROUP.fullmatch(p[1:-1])
        lits = literals(core) if grouped or "|" not in core or not (start or end) else None
        if lits is None or (end and not start):
            self.rest.append(p)
        elif start and end:
            self.whole.update(lits)
        elif start:
            self.prefixes.extend(lits)
        else:
            self.inside.extend(lits)


def _plan(patterns: Sequence[str]) -> _Plan:
    plan = _Plan()
    for p in dict.fromkeys(patterns):
        m = _GLOBAL_FLAGS.match(p)
        if m is None:
            plan.add_plain(p)
        elif m.group(1) == "i" and _lower_ascii(p[m.end() :]):
            plan.add_folded(p, p[m.end() :])
        else:
            plan.rest.append(p)
    return plan


class NameTest:
    """``name -> any(re.search(p, name) for p in patterns)`` (call it), plus :meth:`candidates`:
    for a block of names joined by NUL characters, which names can match at all, found with a few
    numpy operations over the whole block, so that the per-name test runs only on those."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = list(dict.fromkeys(patterns))
        self.test = any_match(self.patterns)
        plan = _plan(self.patterns)
        need: list[str] | None = [*plan.inside, *plan.prefixes, *plan.whole]
        for p in plan.rest:
            lit = required_prefix(p)
            if lit is None or need is None:
                need = None
                break
            need.append(lit)
        if need is not None and not plan.folded_rx:
            # searched in the lowered block: a name containing a needle contains its lowered
            # form there (a superset of the candidates, which is all the prefilter needs), and a
            # needle that contains another needle finds no name that one does not
            lowered = {n.lower() for n in need} | set(plan.folded)
            self._needles: list[str] | None = sorted(
                n for n in lowered if not any(m != n and m in n for m in lowered)
            )
        else:
            self._needles = None
        # the needles as character-pair codes (one-character needles as codes); a needle that
        # is not ASCII is in no ASCII block, the only blocks the prefilter answers for
        ascii_needles = [n for n in self._needles or [] if n.isascii()]
        self._pairs = [
            np.array(
                [ord(a) << 8 | ord(b) for a, b in zip(n[:-1], n[1:], strict=True)], dtype=np.int64
            )
            for n in ascii_needles
            if len(n) > 1
        ]
        self._singles = np.array([ord(n) for n in ascii_needles if len(n) == 1], dtype=np.uint8)

    def __call__(self, name: str) -> bool:
        return self.test(name)

    @property
    def needles(self) -> tuple[str, ...] | None:
        """Lowercase strings one of which the lowered text of every ASCII name this test passes
        contains (what :meth:`candidates` looks for), or None when there are none to be sure of.
        The page decoder refuses the ASCII texts that hold none without decoding them."""
        return None if self._needles is None else tuple(self._needles)

    def including(self, *literals: str) -> NameTest:
        """The same test, also true for names containing any of ``literals`` (plain text)."""
        return NameTest([*self.patterns, *(re.escape(lit) for lit in literals)])

    def candidates(self, joined: str, ends: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_] | None:
        """Per name of ``joined`` (names each ending at the NUL at ``ends``): can it match? None
        when this cannot be told from substrings (patterns without a required literal, or
        non-ASCII text, whose case folding differs).

        A name can match only if its lowered text contains a needle, and so every two-character
        pair of that needle: per needle, the pair rarest in this block is looked for, all needles
        at once (one table lookup per character of the block, instead of one substring search
        per needle)."""
        if self._needles is None or not joined.isascii():
            return None
        out = np.zeros(ends.size, dtype=bool)
        # ASCII: every character stays where it was, one byte each
        hay = np.frombuffer(joined.lower().encode("ascii"), dtype=np.uint8)
        pairs = hay[:-1].astype(np.uint16)
        pairs <<= 8
        pairs |= hay[1:]
        count = np.bincount(pairs, minlength=1 << 16)
        wanted = np.zeros(1 << 16, dtype=bool)
        for codes in self._pairs:
            wanted[codes[np.argmin(count[codes])]] = True
        hits = np.flatnonzero(wanted[pairs])
        if self._singles.size:
            hits = np.concatenate([hits, np.flatnonzero(np.isin(hay, self._singles))])
        out[np.searchsorted(ends, hits)] = True
        return out


def _top_level_alternation(pattern: str) -> bool:
    """Whether ``pattern`` has a ``|`` outside every group (escapes and classes skipped)."""
    depth, k = 0, 0
    while k < len(pattern):
        c = pattern[k]
        if c == "\\":
            k += 1
        elif c == "[":
            k = pattern.find("]", k + 2)  # a ] right after [ (or [^) is a literal ]
            if k < 0:
                return True  # not a pattern this scan understands: assume the worst
        elif c in "()":
            depth += 1 if c == "(" else -1
        elif c == "|" and depth == 0:
            return True
        k += 1
    return False


def required_prefix(pattern: str) -> str | None:
    """A literal every match of ``pattern`` contains: the plain text after a leading ``^`` (the
    last character dropped when a quantifier follows it); None when there is none to be sure of
    (no anchor, an escape, or an alternation outside parentheses)."""
    if not pattern.startswith("^") or _top_level_alternation(pattern):
        return None
    k = 1
    while k < len(pattern) and pattern[k] not in _META:
        k += 1
    lit = pattern[1:k]
    if k < len(pattern) and pattern[k] in "?*{":
        lit = lit[:-1]
    return lit or None


def any_match(patterns: Sequence[str]) -> Callable[[str], bool]:
    """``name -> any(re.search(p, name) for p in patterns)``, computed faster (module docstring).
    The patterns must compile."""
    plan = _plan(patterns)
    whole, starts, inside, folded = plan.whole, tuple(plan.prefixes), plan.inside, plan.folded
    low = _any_search(plan.folded_rx)
    full = _any_search(plan.folded_full)
    other = _any_search(plan.rest)

    def test(name: str) -> bool:
        # plain loops, no generator per call: this runs once per NVTX text of an export
        if name in whole:
            return True
        if starts and name.startswith(starts):
            return True
        if whole and name.endswith("\n") and name[:-1] in whole:  # $ matches before a final \n
            return True
        for lit in inside:
            if lit in name:
                return True
        if other is not None and other(name):
            return True
        if full is None:
            return False
        if not name.isascii():
            return full(name)
        lowered = name.lower()
        for lit in folded:
            if lit in lowered:
                return True
        return low is not None and low(lowered)

    return test


def _lower_ascii(body: str) -> bool:
    # no uppercase letters at all: no \S \W \D \B \A \Z escapes, whose meaning lowercasing the
    # name would not keep, and literals that match the lowered name as they are
    return body.isascii() and body == body.lower() and "(?" not in body


def _sre() -> tuple[Any, Any]:
    """The regex parser and its constants (``re._parser`` from Python 3.11, ``sre_parse``
    before), for :func:`required_literals`."""
    try:
        return importlib.import_module("re._parser"), importlib.import_module("re._constants")
    except ImportError:  # pragma: no cover - Python 3.10
        return importlib.import_module("sre_parse"), importlib.import_module("sre_constants")


def _needles(items: Any, c: Any) -> set[str] | None:
    """Strings one of which every match of the parsed sequence ``items`` contains, or None."""
    options: list[set[str]] = []
    run: list[str] = []
    repeats = {c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", c.MAX_REPEAT)}
    for op, av in items:
        if op is c.LITERAL:
            run.append(chr(av))
            continue
        if op is c.AT:  # zero-width (^, $, \b): the characters around it are adjacent
            continue
        if run:
            options.append({"".join(run)})
            run = []
        sub: set[str] | None = None
        if op is c.SUBPATTERN:
            sub = _needles(av[-1], c)
        elif op is c.BRANCH:
            alts = [_needles(a, c) for a in av[1]]
            known = [a for a in alts if a is not None]
            sub = set().union(*known) if len(known) == len(alts) else None
        elif op in repeats and av[0] >= 1:
            sub = _needles(av[2], c)
        elif op is getattr(c, "ATOMIC_GROUP", None):
            sub = _needles(av, c)
        if sub:
            options.append(sub)
    if run:
        options.append({"".join(run)})
    if not options:
        return None
    return max(options, key=lambda s: min(len(n) for n in s))  # the longest shortest needle


@functools.lru_cache(maxsize=256)
def required_literals(pattern: str, flags: int = 0) -> tuple[str, ...] | None:
    """Lowercase ASCII strings one of which the lowered text of every match of ``pattern``
    contains (``(?i)## forward ##|\\.forward$`` -> ``## forward ##``, ``.forward``), or None
    when the pattern has none to be sure of (an alternative made only of classes or
    wildcards, a literal that is not ASCII or is a NUL). Only ASCII names may be prefiltered
    with them: ``(?i)`` case folding maps other characters onto ASCII (``\\u212a`` is k)."""
    parser, consts = _sre()
    try:
        parsed = parser.parse(pattern, flags)
    except Exception:  # noqa: BLE001 - not a pattern re can parse: no literals
        return None
    found = _needles(parsed, consts)
    if found is None or any(not n.isascii() or "\x00" in n for n in found):
        return None
    low = {n.lower() for n in found}
    # a needle that contains another finds no name that one does not
    return tuple(sorted(n for n in low if not any(m != n and m in n for m in low)))


class NameBlock:
    """Distinct names, many patterns: :meth:`search` is ``[rx.search(n) is not None for n in
    names]``, the pattern run only on the names that can match. The ASCII names are joined by
    NULs and lowered once; per pattern, each of its :func:`required_literals` is looked for in
    that text with C substring searches, and the pattern runs on the names holding one (and on
    every name that is not ASCII). A literal holds no NUL, so none found straddles two names."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = names
        joined = "\x00".join(names)
        if joined.isascii():
            self._ascii = np.arange(len(names))
            self._other = np.zeros(0, dtype=np.int64)
        else:
            is_ascii = np.fromiter((n.isascii() for n in names), dtype=bool, count=len(names))
            self._ascii, self._other = np.flatnonzero(is_ascii), np.flatnonzero(~is_ascii)
            joined = "\x00".join(names[i] for i in self._ascii.tolist())
        self._hay = joined.lower()  # ASCII: every character stays where it was
        size = np.fromiter(
            (len(names[i]) + 1 for i in self._ascii.tolist()),
            dtype=np.int64,
            count=self._ascii.size,
        )
        self._starts = np.cumsum(size) - size

    def search(self, rx: re.Pattern[str]) -> npt.NDArray[np.bool_]:
        names = self.names
        out = np.zeros(len(names), dtype=bool)
        needles = required_literals(rx.pattern, rx.flags)
        search = rx.search
        if needles is None:
            out[:] = [search(n) is not None for n in names]
            return out
        find = self._hay.find
        at: list[int] = []
        for needle in needles:
            k = find(needle)
            while k >= 0:  # one hit per name: on from the end of the name that has one
                at.append(k)
                end = find("\x00", k)
                k = find(needle, end + 1) if end >= 0 else -1
        hit = self._ascii[np.unique(np.searchsorted(self._starts, at, side="right") - 1)]
        cand = np.concatenate((self._other, hit)) if self._other.size else hit
        out[cand] = [search(names[i]) is not None for i in cand.tolist()]
        return out

    def any(self, rx: re.Pattern[str]) -> bool:
        """``self.search(rx).any()``, stopping at the first name that matches."""
        names, search = self.names, rx.search
        needles = required_literals(rx.pattern, rx.flags)
        if needles is None:
            return any(search(n) is not None for n in names)
        if any(search(names[i]) is not None for i in self._other.tolist()):
            return True
        find = self._hay.find
        for needle in needles:
            k = find(needle)
            while k >= 0:
                i = int(self._ascii[np.searchsorted(self._starts, k, side="right") - 1])
                if search(names[i]) is not None:
                    return True
                end = find("\x00", k)
                k = find(needle, end + 1) if end >= 0 else -1
        return False


def search_each(rx: re.Pattern[str], names: Sequence[str]) -> npt.NDArray[np.bool_]:
    """``[rx.search(n) is not None for n in names]``, faster (:class:`NameBlock`)."""
    return NameBlock(names).search(rx)
