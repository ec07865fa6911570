"""``timeline.png``: a chaos run's throughput and latency over time, fault windows shaded, as
Jepsen's perf graphs (``jepsen.checker.perf``: rate on top, latency points below, nemesis
activity as shaded regions).

The only module of chaos/ that imports matplotlib, and only inside :func:`draw_timeline`,
with the Agg backend (no display, safe from any thread or a terminal without X).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tidelog.chaos.report import BUCKET_S, FaultWindow, Timeline

__all__ = ["draw_timeline"]

COLOURS = {"ok": "#1b9e77", "fail": "#d95f02", "info": "#7570b3"}
FAULT_COLOURS = ("#fdd49e", "#c6dbef", "#d9f0d3", "#f2d0f0", "#fff7bc")


def draw_timeline(line: Timeline, windows: Sequence[FaultWindow], path: Path, *,
                  title: str) -> None:
    """Write the figure to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (rate_ax, lat_ax) = plt.subplots(2, 1, sharex=True, figsize=(10, 6),
                                          height_ratios=(1, 1.3))
    try:
        xs = [i * BUCKET_S for i in range(len(line.ok_per_bucket))]
        rate_ax.step(xs, [line.rate(i) for i in range(len(xs))], where="post",
                     color=COLOURS["ok"], label="ok sends/s")
        rate_ax.set_ylabel("ok sends / s")
        rate_ax.set_title(title)
        for kind, colour in COLOURS.items():
            pts = [p for p in line.sends if p.type == kind]
            if pts:
                lat_ax.scatter([p.t_s for p in pts], [max(p.latency_ms, 0.1) for p in pts],
                               s=4, color=colour, label=f"{kind} ({len(pts)})", alpha=0.6)
        lat_ax.set_yscale("log")
        lat_ax.set_ylabel("send latency (ms)")
        lat_ax.set_xlabel("seconds since the run started")
        for index, w in enumerate(windows):
            end = w.heal_s if w.heal_s is not None else line.end_s
            colour = FAULT_COLOURS[index % len(FAULT_COLOURS)]
            for ax in (rate_ax, lat_ax):
                ax.axvspan(w.start_s, end, color=colour, alpha=0.6, lw=0,
                           label=w.name if ax is rate_ax else None)
        rate_ax.legend(loc="lower left", fontsize="small")
        lat_ax.legend(loc="upper left", fontsize="small", markerscale=3)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
