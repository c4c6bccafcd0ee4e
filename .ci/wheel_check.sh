#!/usr/bin/env bash
# The package as users get it: a wheel built from the tree, installed non-editable in a fresh
# venv, run from outside the repository. The editable install the tests use hides a package left
# out of the wheel (readers/nsys once was); here both formats are read from the installed copy,
# and every module of it imports.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip wheel -q --no-deps "$repo" -w "$tmp/dist"
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --upgrade pip
"$tmp/venv/bin/python" -m pip install -q "$tmp"/dist/traceoverlap-*.whl
cd "$tmp"  # not the repository: nothing is imported from the source tree
"$tmp/venv/bin/python" - "$tmp/venv" <<'PY'
import importlib
import pkgutil
import sys

import traceoverlap

assert traceoverlap.__file__.startswith(sys.argv[1]), traceoverlap.__file__
names = [m.name for m in pkgutil.walk_packages(traceoverlap.__path__, "traceoverlap.")]
for name in names:
    importlib.import_module(name)
import traceoverlap_workloads  # noqa: F401  (profile runs it as a module)
from traceoverlap.readers.kineto._columns import SCANNER

assert SCANNER == "c", "the wheel was built without the Kineto scanner (no C compiler?)"
from traceoverlap.readers.nsys._pages import DECODER

assert DECODER == "c", "the wheel was built without the Nsight page decoder (no C compiler?)"
print(f"wheel: {len(names)} modules import from {traceoverlap.__file__}")
PY
for input in "$repo/fixtures/workloads/bucketed" "$repo/fixtures/nsys/bucketed_cpu_2rank.sqlite"; do
  "$tmp/venv/bin/traceoverlap" analyze "$input" --format json -o "$tmp/out.json"
  "$tmp/venv/bin/python" -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['steps'], sys.argv[2]; print('wheel: read', sys.argv[2], len(d['steps']), 'step rows')" "$tmp/out.json" "$input"
done
