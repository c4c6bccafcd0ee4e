"""``traceoverlap.options``, the name the Python API documents (docs/python-api.md), is
:mod:`traceoverlap.core.options`: the same module object, not a copy."""

import sys

from .core import options

sys.modules[__name__] = options
