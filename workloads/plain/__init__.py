"""Standalone scripts written as a user would, without the reference workloads' ranges (no
``gloo:*`` or ``pp_*`` markers of their own): what the analysis must read right from the
profiler's own events alone (docs/diagnosis.md §11). Each spawns its ranks itself::

    OMP_NUM_THREADS=1 python workloads/plain/gpipe_blocking.py --out runs/gpipe
    OMP_NUM_THREADS=1 python workloads/plain/allreduce_blocking.py --out runs/ar
"""
