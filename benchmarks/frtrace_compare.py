"""The same Flight Recorder dumps through PyTorch's ``torchfrtrace`` and ``traceoverlap hang``,
side by side: what each says, or how it fails (docs/hang.md "Beside torchfrtrace").

Run: ``python benchmarks/frtrace_compare.py [DIR ...]`` (default: every case folder under
``fixtures/flightrec/``). For each folder of per-rank dumps it runs

- ``python -m torch.distributed.flight_recorder.fr_trace DIR -p PREFIX`` (``torchfrtrace``; the
  prefix is the dump names' common part before the rank), on the folder as given and, when the
  folder also holds JSON twins, on a copy holding the pickles only (what a user tries next);
- ``python -m traceoverlap hang DIR --format json`` (its ``answer``),

each in its own process with a timeout, and prints the first lines of what each says (a
traceback is shown as its last line). Needs torch for ``torchfrtrace``; traceoverlap does not.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 120


def _prefix(d: Path) -> str:
    names = [p.name for p in d.iterdir() if p.is_file() and re.search(r"\d+$", p.name)]
    heads = {re.sub(r"\d+$", "", n) for n in names}
    return sorted(heads)[0] if heads else "fr_"


def _run(cmd: list[str]) -> tuple[int, str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {TIMEOUT_S} s"
    return p.returncode, p.stdout, p.stderr


def _said(rc: int, out: str, err: str, lines: int = 4) -> str:
    if rc != 0:
        tail = [x for x in err.strip().splitlines() if x.strip()]
        return f"fails (exit {rc}): {tail[-1] if tail else '(no message)'}"
    # torchfrtrace reports through its logger (stderr): its verdict lines are the ones to show
    body = [x.strip() for x in (out + "\n" + err).splitlines() if x.strip()]
    body = [x for x in body if "tabulate" not in x]
    key = [x for x in body if x.startswith(("Collective sequence number", "error msg"))]
    return " / ".join((key or body)[:lines]) if body else "(says nothing)"


def torchfrtrace(d: Path) -> str:
    cmd = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(d)]
    return _said(*_run([*cmd, "-p", _prefix(d)]))


def ours(d: Path) -> str:
    rc, out, err = _run([sys.executable, "-m", "traceoverlap", "hang", str(d), "--format", "json"])
    if rc != 0:
        return _said(rc, out, err)
    return str(json.loads(out)["answer"])


def _patched(pickles: list[Path]) -> Path | None:
    """A copy of gloo pickle dumps whose default group's ``pg_config`` is keyed as its entries
    name it (``'0'``, not gloo's ``''``): how far torchfrtrace gets past that first failure.
    Unpickles the files: run it on dumps you made yourself only."""
    import pickle

    out = Path(tempfile.mkdtemp())
    changed = False
    for p in pickles:
        try:
            d = pickle.loads(p.read_bytes())  # noqa: S301 - our own fixtures, see the docstring
        except Exception:  # noqa: BLE001 - a JSON twin or a broken file: not patched
            shutil.rmtree(out)
            return None
        cfg = d.get("pg_config", {})
        if "" in cfg:
            names = {tuple(e["process_group"]) for e in d.get("entries", [])}
            default = next((n for n in names if n[1] == "default_pg"), ("0", "default_pg"))
            cfg[default[0]] = dict(cfg.pop(""), name=default[0], desc=default[1])
            changed = True
        (out / p.name).write_bytes(pickle.dumps(d))
    if not changed:
        shutil.rmtree(out)
        return None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*", type=Path)
    args = ap.parse_args()
    dirs = args.dirs or sorted(p for p in (REPO / "fixtures" / "flightrec").glob("*") if p.is_dir())
    if not dirs:
        sys.exit("no dump folders: give some, or add fixtures/flightrec/<case>/")
    for d in dirs:
        print(f"== {d.name}")
        variants = [("as given", d)]
        pickles = [p for p in d.iterdir() if p.is_file() and re.search(r"\d+$", p.name)]
        tmp = None
        if pickles and len(pickles) < sum(1 for p in d.iterdir() if p.is_file()):
            tmp = Path(tempfile.mkdtemp())
            for p in pickles:
                shutil.copy(p, tmp / p.name)
            variants.append(("pickles only", tmp))
        patched = _patched(pickles)
        if patched is not None:
            variants.append(("pickles, gloo pg_config patched", patched))
        for label, v in variants:
            for tool, said in (("torchfrtrace", torchfrtrace(v)), ("traceoverlap", ours(v))):
                print(textwrap.fill(f"{tool} ({label}): {said}", 100, subsequent_indent="    "))
        for t in (tmp, patched):
            if t is not None:
                shutil.rmtree(t)


if __name__ == "__main__":
    main()
