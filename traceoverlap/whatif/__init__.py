"""What fixing it would buy: the run graph joined across units, its replay, the overlap tax, and
the scenarios (docs/whatif.md).
"""
