"""Reading what the perf tools print, for the comparison scripts of perf/."""


def times(path):
    """{size in bytes: out-of-place time per call in us} of one perf tool's output."""
    out = {}
    for line in open(path):
        f = line.split()
        if line.startswith("#") or len(f) != 13:
            continue
        out[int(f[0])] = float(f[5])
    return out
