#!/usr/bin/python3
"""Plots chorus-tune --simulate --csv output: predicted bus bandwidth against ranks, one panel
per collective, one line per size, each point marked by the algorithm the selector picked.
usage: chorus-tune --simulate --csv ... | perf/plot_simulation.py out.png [title]
Needs matplotlib (Debian: python3-matplotlib)."""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MARKERS = {"ring": "o", "tree": "^", "oneshot": "s", "twoshot": "D", "rd": "x", "hier": "*"}


def size_text(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return "%d %s" % (b >> shift, unit)
    return "%d B" % b


def main():
    out = sys.argv[1]
    title = sys.argv[2] if len(sys.argv) > 2 else "chorus-tune --simulate"
    rows = list(csv.DictReader(sys.stdin))
    colls = list(dict.fromkeys(r["collective"] for r in rows))
    fig, axes = plt.subplots(1, len(colls), figsize=(6 * len(colls), 4.5), squeeze=False)
    for ax, coll in zip(axes[0], colls):
        lines = defaultdict(list)
        for r in rows:
            if r["collective"] == coll:
                lines[int(r["bytes"])].append((int(r["ranks"]), float(r["busbw_gbps"]), r["algorithm"]))
        for size in sorted(lines):
            pts = sorted(lines[size])
            (line,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], label=size_text(size))
            for algo, marker in MARKERS.items():
                sel = [p for p in pts if p[2] == algo]
                if sel:
                    ax.scatter([p[0] for p in sel], [p[1] for p in sel], marker=marker,
                               color=line.get_color(), s=30)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("ranks")
        ax.set_ylabel("predicted bus bandwidth (GB/s)")
        ax.set_title(coll)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, title="size", title_fontsize=7)
    handles = [plt.Line2D([], [], linestyle="", marker=m, color="black", label=a)
               for a, m in MARKERS.items()]
    fig.legend(handles=handles, loc="lower center", ncol=len(MARKERS), fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    fig.savefig(out, dpi=90)


if __name__ == "__main__":
    main()
