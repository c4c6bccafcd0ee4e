"""The reduce: the units' compact results -> an Analysis (matching across ranks, the job model,
verdicts, findings, summaries, across ranks, compare, gate), and running the map here, in
processes or on Dask.
"""
