"""``traceoverlap.vocab``, the name the Python API documents (docs/python-api.md), is
:mod:`traceoverlap.core.vocab`: the same module object, not a copy."""

import sys

from .core import vocab

sys.modules[__name__] = vocab
