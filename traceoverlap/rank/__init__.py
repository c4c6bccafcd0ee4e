"""The map: one unit's Timeline -> its compact results (classify, steps, metrics, CPU windows,
host waits, local causes, collective instances, purposes, the unit's run graph).
"""
