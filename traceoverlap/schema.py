"""``traceoverlap.schema``, the name the Python API documents (docs/python-api.md), is
:mod:`traceoverlap.core.schema`: the same module object, not a copy."""

import sys

from .core import schema

sys.modules[__name__] = schema
