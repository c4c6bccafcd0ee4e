"""The words and the table: vocabulary, the Timeline, the output columns, errors, interval
algebra, formatting, options. Imports nothing else of traceoverlap.
"""
