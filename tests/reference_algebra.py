"""Plain-Python interval algebra for the independent derivations in the real-trace tests.

Deliberately not traceoverlap.core.intervals: a second, obviously-correct implementation (sort and
sweep over lists) so the tests do not check the library against itself.
"""


def union(iv):
    out = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def length(iv):
    return sum(e - s for s, e in iv)


def overlap(a, b):
    """|a ∩ b| for two disjoint sets (as from union), by brute force over all pairs."""
    return sum(max(0, min(e1, e2) - max(s1, s2)) for s1, e1 in a for s2, e2 in b)
