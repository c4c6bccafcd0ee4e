#!/usr/bin/env bash
# The peers of the diagnosis benchmark, in their own venv (benchmarks/diagnosis/peers/.venv,
# git-ignored), installed from the package registry by their ordinary client, pinned.
#
#   bash benchmarks/diagnosis/peers/setup.sh            # then
#   benchmarks/diagnosis/peers/.venv/bin/python benchmarks/diagnosis/peers/run_hta.py
#
# - traceinsight 0.6.1: Meta's Holistic Trace Analysis (HTA) under its new PyPI name (the older
#   name, HolisticTraceAnalysis, stops at 0.5.0). Its `import hta` is what run_hta.py drives.
# - AMD TraceLens: not installed. It is published on GitHub only (AMD-AGI/TraceLens, installed
#   with `pip install git+https://github.com/...`); the PyPI name `tracelens` (0.7.0) is an
#   unrelated project (an evaluation framework for AI agents). It does not install from the
#   registries, so the benchmark records it as such (versions.json) and scores it nowhere.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
py="${PYTHON:-python3}"
"$py" -m venv "$here/.venv"
"$here/.venv/bin/python" -m pip install --quiet "traceinsight==0.6.1"
"$here/.venv/bin/python" - "$here/versions.json" <<'EOF'
import json, platform, sys
from importlib.metadata import PackageNotFoundError, version

def v(name):
    try:
        return version(name)
    except PackageNotFoundError:
        return None

out = {
    "python": platform.python_version(),
    "traceinsight": v("traceinsight"),
    "pandas": v("pandas"),
    "numpy": v("numpy"),
    "tracelens_amd": None,
    "tracelens_amd_note": (
        "AMD TraceLens is on GitHub only (AMD-AGI/TraceLens): it does not install from the "
        "registries; PyPI's `tracelens` is an unrelated agent-evaluation framework"
    ),
}
with open(sys.argv[1], "w") as f:
    json.dump(out, f, indent=1, sort_keys=True)
    f.write("\n")
print(json.dumps(out, indent=1, sort_keys=True))
EOF
