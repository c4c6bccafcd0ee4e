"""Recording traces: the reference workloads run under the PyTorch profiler or Nsight Systems
(`traceoverlap profile`, `demo`).
"""
