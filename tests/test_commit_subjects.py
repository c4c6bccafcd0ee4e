"""The commit-subject check of CI (.ci/commit_subjects.py) on hand-built repositories."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / ".ci" / "commit_subjects.py"
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("commit_subjects", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env |= {"GIT_COMMITTER_EMAIL": "t@t", "HOME": str(repo), "PATH": os.environ["PATH"]}
    out = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env
    )
    return out.stdout.strip()


def _repo(tmp_path: Path, subjects: list[str]) -> tuple[Path, str]:
    """A repository whose first commit has a 100-character subject (before the base: never
    checked), then one commit per subject; returns it and the base (the first commit)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "x" * 100)
    base = _git(repo, "rev-parse", "HEAD")
    for s in subjects:
        _git(repo, "commit", "-q", "--allow-empty", "-m", s)
    return repo, base


def test_flags_only_subjects_over_72_after_the_base(tmp_path: Path, capsys) -> None:
    ok, long = "a" * 72, "b" * 73  # 72 fits; 73 is one over
    repo, base = _repo(tmp_path, [ok, long + "\n\nthe body may be as long as it needs " * 5])
    found = _script().long_subjects(repo, base)
    assert [s for _, s in found] == [long]
    assert _script().main(["--repo", str(repo), "--base", base]) == 1
    assert "subject is 73 characters" in capsys.readouterr().out


def test_passes_when_every_subject_fits(tmp_path: Path) -> None:
    repo, base = _repo(tmp_path, ["a" * 72, "short"])
    assert _script().main(["--repo", str(repo), "--base", base]) == 0


def test_shallow_clone_without_the_base_is_skipped(tmp_path: Path, capsys) -> None:
    repo, base = _repo(tmp_path, ["b" * 80, "c"])
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(clone))
    assert _script().main(["--repo", str(clone), "--base", base]) == 0
    assert "skipped (shallow clone" in capsys.readouterr().out


def test_not_a_checkout_is_skipped(tmp_path: Path, capsys) -> None:
    assert _script().main(["--repo", str(tmp_path), "--base", "0" * 40]) == 0
    assert "skipped" in capsys.readouterr().out
