#!/usr/bin/env bash
# The C extensions' safety net, run by .ci/run (issues 35, 40): readers/kineto/_kscan.c and
# readers/nsys/_npage.c built with AddressSanitizer and UndefinedBehaviorSanitizer, then
# tests/test_kscan.py and tests/test_npage.py against them: every fixture and real trace, and the
# random-document / random-table and byte-mutation differential fuzz (each extension against the
# Python path it speeds up) with TRACEOVERLAP_FUZZ_EXAMPLES examples per property.
# Fails on any test failure (a divergence from the msgspec path), any sanitizer report, or a run
# past KSCAN_ASAN_TIMEOUT_S. The sanitized build goes to a copy of the package in a temporary
# folder: the checkout's own build is never touched.
#
#   bash .ci/kscan_asan.sh                      # python from PATH (CI: the venv's)
#   TRACEOVERLAP_FUZZ_EXAMPLES=5000 bash .ci/kscan_asan.sh   # a longer campaign
#   (TRACEOVERLAP_NPAGE_EXAMPLES: the same for tests/test_npage.py, 300 unless set)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
python=${PYTHON:-python}
examples=${TRACEOVERLAP_FUZZ_EXAMPLES:-1500}
limit=${KSCAN_ASAN_TIMEOUT_S:-900}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r traceoverlap "$work/"
find "$work/traceoverlap" \( -name '_kscan*.so' -o -name '_npage*.so' \) -delete
suffix=$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
include=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
gcc -shared -fPIC -O1 -g -fno-omit-frame-pointer \
    -fsanitize=address,undefined -fno-sanitize-recover=undefined \
    -I"$include" traceoverlap/readers/kineto/_kscan.c \
    -o "$work/traceoverlap/readers/kineto/_kscan$suffix"
gcc -shared -fPIC -O1 -g -fno-omit-frame-pointer \
    -fsanitize=address,undefined -fno-sanitize-recover=undefined \
    -I"$include" traceoverlap/readers/nsys/_npage.c \
    -o "$work/traceoverlap/readers/nsys/_npage$suffix"

# the interpreter is not instrumented: the runtimes are preloaded, and Python's own allocator is
# off so that ASan sees every allocation; leaks are Python's, not the scanner's
export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
# the first error stops the run (pytest runs with --capture=no: a process that stops mid-test
# would take the report it captured with it)
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:halt_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export PYTHONMALLOC=malloc PYTHONPATH="$work${PYTHONPATH:+:$PYTHONPATH}"
export TRACEOVERLAP_REQUIRE_KSCAN=1 TRACEOVERLAP_REQUIRE_NPAGE=1 TRACEOVERLAP_FUZZ_EXAMPLES="$examples"
# the page decoder's examples each write and read an SQLite file: fewer of them
export TRACEOVERLAP_NPAGE_EXAMPLES="${TRACEOVERLAP_NPAGE_EXAMPLES:-300}"

# run from the copy: Python puts the working folder first on the path, so the sanitized scanner
# is the one imported (not an installed or in-place build): checked
cd "$work"
"$python" -c 'import sys
from traceoverlap.readers.kineto import _columns
from traceoverlap.readers.nsys import _pages
for mod in (_columns._kscan, _pages._npage):
    so = getattr(mod, "__file__", "")
    if not so.startswith(sys.argv[1]):
        sys.exit(f"kscan_asan: imported {so or None}, not the sanitized build")' "$work"

log="$work/pytest.log"
set +e
timeout --kill-after=30 "$limit" "$python" -m pytest -q -p no:cacheprovider -o addopts= --capture=no \
    --timeout="$limit" --rootdir="$repo" -c "$repo/pyproject.toml" "$repo/tests/test_kscan.py" \
    "$repo/tests/test_npage.py" "$repo/tests/test_nsys_sqlite_columns.py" \
    "$repo/tests/test_fast_paths_nsysread.py" "$repo/tests/test_fast_paths_nsyspage.py" \
    2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
if grep -qE "ERROR: AddressSanitizer|runtime error:|SUMMARY: (Address|UndefinedBehavior)Sanitizer" "$log"; then
  echo "kscan_asan: a sanitizer reported an error in a C extension (above)" >&2
  exit 1
fi
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "kscan_asan: the C extensions' tests under the sanitizers ran past ${limit} s" >&2
  exit 1
fi
if [ "$rc" -ne 0 ]; then
  echo "kscan_asan: the C extensions' tests failed under the sanitizers (exit $rc): a divergence" \
       "from the Python path turns the extension off by default until fixed (CONTRIBUTING.md)" >&2
  exit 1
fi
echo "kscan_asan: no sanitizer report, no divergence ($examples examples per property," \
  "$TRACEOVERLAP_NPAGE_EXAMPLES per page-decoder property)"
