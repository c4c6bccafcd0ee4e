"""The examples in README.md and docs/*.md, generated from the tool's own output.

An example is a marked block in the Markdown::

    <!-- example: traceoverlap analyze fixtures/workloads/slow_rank
         keep: ^rank step .. ^What to try
         keep: ^What to try .. ^  2\\. -->
    ```console
    $ traceoverlap analyze fixtures/workloads/slow_rank
    ...the output, written here...
    ```
    <!-- /example -->

The command runs in the repository root at 80 columns, without colour. ``keep: START .. END``
(regexes, repeatable) keeps the lines from the first matching START up to, not including, the next
matching END (to the end when END is empty), with ``...`` where lines were left out; without
``keep`` the whole output is shown. ``json: first`` cuts every list of a JSON output to its first
item and prints it compactly (100 columns).

    python tools/doc_examples.py           # rewrite every example from the tool's output
    python tools/doc_examples.py --check   # exit 1, with a diff, when one is stale

``tests/test_doc_examples.py`` runs the check.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
WIDTH = 80
JSON_WIDTH = 100
FIX = "python tools/doc_examples.py"

_BLOCK = re.compile(
    r"(?P<head><!-- example: (?P<spec>.*?)-->\n)(?P<body>.*?)(?P<tail><!-- /example -->)", re.S
)


@dataclass(frozen=True)
class Example:
    document: Path
    command: str
    keep: tuple[tuple[str, str], ...]
    json_first: bool

    @property
    def fence(self) -> str:
        return "json" if self.json_first else "console"


def parse(document: Path, spec: str) -> Example:
    lines = [line.strip() for line in spec.strip().splitlines() if line.strip()]
    command, keep, json_first = lines[0], [], False
    for line in lines[1:]:
        key, _, value = line.partition(":")
        if key == "keep":
            start, sep, end = value.partition(" .. ")
            if not sep:
                raise ValueError(f"{document.name}: keep needs 'START .. END': {line}")
            keep.append((start.strip(), end.strip()))
        elif key == "json" and value.strip() == "first":
            json_first = True
        else:
            raise ValueError(f"{document.name}: unknown example option: {line}")
    if not command.startswith("traceoverlap "):
        raise ValueError(f"{document.name}: an example runs traceoverlap: {command}")
    return Example(document, command, tuple(keep), json_first)


def examples(text: str, document: Path) -> Iterator[tuple[re.Match[str], Example]]:
    for m in _BLOCK.finditer(text):
        yield m, parse(document, m["spec"])


def run(command: str) -> str:
    """The command's standard output, as a terminal of :data:`WIDTH` columns without colour
    would show it (in this process: the CLI is click's)."""
    from click.testing import CliRunner

    from traceoverlap.cli import main

    env = {"COLUMNS": str(WIDTH), "NO_COLOR": "1", "TERM": "dumb"}
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        res = CliRunner().invoke(main, shlex.split(command)[1:], env=env, catch_exceptions=False)
    finally:
        os.chdir(cwd)
    if res.exit_code not in (0, 3):  # 3: --fail-if met, an output worth showing
        raise RuntimeError(f"{command}: exit {res.exit_code}\n{res.output}")
    return res.stdout


def _keep(lines: list[str], keep: tuple[tuple[str, str], ...]) -> list[str]:
    out: list[str] = []
    shown = 0  # the lines before this index are shown or marked left out
    for start, end in keep:
        i = next((k for k, line in enumerate(lines) if re.search(start, line)), None)
        if i is None:
            raise ValueError(f"keep: no line matches {start!r}")
        j = next(
            (k for k in range(i + 1, len(lines)) if end and re.search(end, lines[k])), len(lines)
        )
        if i > shown:
            out.append("...")
        out += lines[i:j]
        shown = j
    while out and not out[-1].strip():
        out.pop()
    if shown < len(lines):
        out.append("...")
    return out


def _first(obj: Any) -> Any:
    """Every list of objects cut to its first item, every map of objects (``ranks``, the
    summary's ``metrics``) to its first entry, each with a ``"..."`` saying how many were cut."""
    if isinstance(obj, list):
        if len(obj) > 1 and all(isinstance(v, (dict, list)) for v in obj):
            return [_first(obj[0]), f"... {len(obj) - 1} more"]
        return [_first(v) for v in obj]
    if isinstance(obj, dict):
        if len(obj) > 1 and all(isinstance(v, dict) for v in obj.values()):
            key = next(iter(obj))
            return {key: _first(obj[key]), "...": f"{len(obj) - 1} more"}
        return {k: _first(v) for k, v in obj.items()}
    return obj


def compact_json(obj: Any, indent: int = 0, used: int = 0, width: int = JSON_WIDTH) -> str:
    """JSON with each object or list on one line when it fits in ``width`` (``used`` columns of
    its first line are taken already), else one member a line, indented two more."""
    flat = json.dumps(obj, ensure_ascii=False)
    if used + len(flat) <= width or not isinstance(obj, (dict, list)) or not obj:
        return flat
    pad = " " * (indent + 2)
    if isinstance(obj, dict):
        items = []
        for k, v in obj.items():
            key = f"{pad}{json.dumps(k)}: "
            items.append(key + compact_json(v, indent + 2, len(key), width))
    else:
        items = [pad + compact_json(v, indent + 2, indent + 2, width) for v in obj]
    return (
        ("{" if isinstance(obj, dict) else "[")
        + "\n"
        + ",\n".join(items)
        + "\n"
        + (" " * indent + ("}" if isinstance(obj, dict) else "]"))
    )


def block(ex: Example) -> str:
    """The fenced block of an example: the command, then its output."""
    out = run(ex.command)
    if ex.json_first:
        return f"```json\n{compact_json(_first(json.loads(out)))}\n```\n"
    lines = [line.rstrip() for line in out.rstrip("\n").split("\n")]
    if ex.keep:
        lines = _keep(lines, ex.keep)
    return "```console\n$ " + ex.command + "\n" + "\n".join(lines) + "\n```\n"


def regenerate(text: str, document: Path) -> str:
    out, pos = [], 0
    for m, ex in examples(text, document):
        out += [text[pos : m.start("body")], block(ex)]
        pos = m.start("tail")
    return "".join(out) + text[pos:]


def stale() -> list[tuple[Path, str, str]]:
    """(document, text now, text generated) for each document whose examples are stale."""
    found = []
    for doc in DOCUMENTS:
        text = doc.read_text(encoding="utf-8")
        new = regenerate(text, doc)
        if new != text:
            found.append((doc, text, new))
    return found


def diff(doc: Path, old: str, new: str) -> str:
    name = doc.relative_to(REPO).as_posix()
    return "".join(
        difflib.unified_diff(
            old.splitlines(True), new.splitlines(True), f"{name} (written)", f"{name} (generated)"
        )
    )


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(REPO))
    found = stale()
    if "--check" in argv:
        for doc, old, new in found:
            sys.stdout.write(diff(doc, old, new))
        if found:
            print(f"stale examples: {FIX}", file=sys.stderr)
        return 1 if found else 0
    for doc, _, new in found:
        doc.write_text(new, encoding="utf-8")
        print(f"rewrote {doc.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
