"""Package discovery, the one thing pyproject.toml cannot say alone: every package under
traceoverlap/ is found, and workloads/ is installed as `traceoverlap_workloads` so that
`traceoverlap profile` can run it as a subprocess (`python -m traceoverlap_workloads`) from any
install (the analyzer never imports it). Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["traceoverlap", "traceoverlap.*"]), "traceoverlap_workloads"],
    package_dir={"traceoverlap_workloads": "workloads"},
)
