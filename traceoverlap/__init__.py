"""traceoverlap: how much of your communication is hidden behind computation, and why."""

__version__ = "0.1.0"
