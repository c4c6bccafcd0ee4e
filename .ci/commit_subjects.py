#!/usr/bin/env python3
"""Flag commit subjects longer than 72 characters (CONTRIBUTING.md "Commits").

Checks the commits after BASE (default: the commit the rule starts from; the history before it
is not rewritten) up to HEAD, merges included. Exit 0 when every subject fits, 1 when one does
not (each listed), 0 with a message when it cannot check: not a git checkout, or a shallow clone
that does not reach BASE (CI may clone only the tip).

    python .ci/commit_subjects.py [--base COMMIT] [--repo PATH]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

#: The commit the rule applies after: the merge that brought the rule in (six subjects of the
#: round that wrote it, between 0003449 and here, run to 73-79 characters; history is not
#: rewritten, so the check starts after them).
BASE = "9534b3e84bd12aa6c06ddf6497ffad3fd6398385"
MAX_SUBJECT = 72
#: Commits written before the rule on a branch merged after BASE (history is not rewritten).
WRITTEN_BEFORE_THE_RULE = frozenset(
    {
        "3d873c607d00f5386da4ce140b39273a8c75e164",
        "6e2a467c9ab71edc0773f690e15130b631cf1d79",
    }
)


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False
    )


def long_subjects(repo: Path, base: str) -> list[tuple[str, str]] | str:
    """(short hash, subject) of every commit in base..HEAD whose subject is too long; or a
    sentence saying why it cannot check."""
    if _git(repo, "rev-parse", "--git-dir").returncode != 0:
        return f"{repo} is not a git checkout"
    if _git(repo, "cat-file", "-e", f"{base}^{{commit}}").returncode != 0:
        shallow = _git(repo, "rev-parse", "--is-shallow-repository").stdout.strip() == "true"
        if shallow:
            return f"shallow clone: base commit {base[:12]} is not in it"
        raise SystemExit(f"commit_subjects: base commit {base[:12]} is not in the history")
    log = _git(repo, "log", "--format=%H%x00%s", f"{base}..HEAD")
    if log.returncode != 0:
        raise SystemExit(f"commit_subjects: git log failed: {log.stderr.strip()}")
    rows = [line.split("\0", 1) for line in log.stdout.splitlines() if line]
    return [
        (h[:7], s) for h, s in rows if len(s) > MAX_SUBJECT and h not in WRITTEN_BEFORE_THE_RULE
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default=BASE, help="check the commits after this one")
    ap.add_argument("--repo", default=str(Path(__file__).resolve().parents[1]))
    args = ap.parse_args(argv)
    found = long_subjects(Path(args.repo), args.base)
    if isinstance(found, str):
        print(f"commit_subjects: skipped ({found})")
        return 0
    for h, s in found:
        print(f"{h}: subject is {len(s)} characters (at most {MAX_SUBJECT}): {s}")
    if found:
        print("shorten the subject; say why in the body (CONTRIBUTING.md 'Commits')")
        return 1
    print(f"commit_subjects: every subject after {args.base[:12]} fits in {MAX_SUBJECT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
