"""A chaos run as one picture: throughput, latency and who led each partition over time,
with every fault shaded and named."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from tests.chaos import stats
from tests.chaos.history import FAILED, OK, UNKNOWN, Event, LeaderSeen, Outcome

COLOURS = {
    "kill": "#d62728",
    "pause": "#9467bd",
    "term": "#ff7f0e",
    "etcd": "#8c564b",
    "partition": "#e377c2",
    "disk": "#7f7f7f",
    "elect": "#17becf",
    "reassign": "#bcbd22",
}
BROKER_COLOURS = {1: "#1f77b4", 2: "#2ca02c", 3: "#ff7f0e", -1: "#d62728"}


def plot(events: Sequence[Event], path: Path, title: str = "") -> None:
    outcomes = [e for e in events if isinstance(e, Outcome)]
    if not outcomes:
        return
    end = max(e.t for e in outcomes) + 1
    seconds = int(end) + 1
    acked = [0] * seconds
    unknown = [0] * seconds
    failed = [0] * seconds
    for e in outcomes:
        bucket = {OK: acked, UNKNOWN: unknown, FAILED: failed}[e.status]
        bucket[int(e.t)] += 1
    by_second: dict[int, list[float]] = defaultdict(list)
    for t, latency in stats.latencies(events):
        by_second[int(t)].append(latency * 1000)
    xs = sorted(by_second)

    fig, (ax_tput, ax_lat, ax_lead) = plt.subplots(
        3, 1, figsize=(14, 9), sharex=True, gridspec_kw={"height_ratios": [3, 3, 2]}
    )
    windows = stats.fault_windows(events, end)
    for ax in (ax_tput, ax_lat, ax_lead):
        for w in windows:
            ax.axvspan(w.start, w.heal, color=COLOURS.get(w.kind, "#cccccc"), alpha=0.18, lw=0)
        ax.grid(True, alpha=0.3)
    top = max(acked) * 1.25 + 1
    # Label faults where there is room: a long run shows the kinds, a short one targets.
    room = end / 45
    labelled = -room
    for w in windows:
        if w.start - labelled < room:
            continue
        labelled = w.start
        text = f"{w.kind}\n{w.target}" if len(windows) <= 20 else w.kind
        ax_tput.text(w.start, top * 0.97, text, fontsize=7, va="top", rotation=0,
                     color=COLOURS.get(w.kind, "black"))  # fmt: skip

    ax_tput.plot(range(seconds), acked, color="#1f77b4", lw=1.2, label="acknowledged")
    ax_tput.bar(range(seconds), unknown, color="#ff7f0e", width=1.0, label="unknown outcome")
    ax_tput.bar(range(seconds), failed, color="#d62728", width=1.0, label="failed (definite)")
    ax_tput.set_ylim(0, top)
    ax_tput.set_ylabel("sends completed / s")
    ax_tput.legend(loc="lower left", fontsize=8, ncol=3)

    ax_lat.plot(xs, [stats.percentile(by_second[x], 0.5) for x in xs], lw=1, label="p50")
    ax_lat.plot(xs, [stats.percentile(by_second[x], 0.99) for x in xs], lw=1, label="p99")
    ax_lat.plot(xs, [max(by_second[x]) for x in xs], lw=0.8, ls=":", color="grey", label="max")
    ax_lat.set_yscale("log")
    ax_lat.set_ylabel("latency to ack, ms\n(by send time)")
    ax_lat.legend(loc="upper left", fontsize=8, ncol=3)

    _leadership(ax_lead, events, end)
    ax_lead.set_xlabel("seconds since the workload started")
    handles = [Patch(color=c, alpha=0.4, label=k) for k, c in COLOURS.items()]
    handles += [Patch(color=c, label=f"led by broker {b}" if b > 0 else "no leader")
                for b, c in BROKER_COLOURS.items()]  # fmt: skip
    fig.legend(handles=handles, loc="lower center", ncol=12, fontsize=8, frameon=False)
    fig.suptitle(f"partita chaos run {title}: throughput, latency, leadership", fontsize=12)
    fig.tight_layout(rect=(0, 0.04, 1, 0.97))
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _leadership(ax: plt.Axes, events: Sequence[Event], end: float) -> None:
    """One bar per partition, coloured by the leader of the newest epoch announced."""
    newest: dict[int, tuple[int, int]] = {}
    spans: dict[int, list[tuple[float, int, int]]] = defaultdict(list)  # (t, leader, epoch)
    for e in events:
        if not isinstance(e, LeaderSeen):
            continue
        current = newest.get(e.partition)
        if current is None or e.epoch > current[1]:
            newest[e.partition] = (e.leader, e.epoch)
            spans[e.partition].append((e.t, e.leader, e.epoch))
    for partition, changes in spans.items():
        for i, (t, leader, epoch) in enumerate(changes):
            stop = changes[i + 1][0] if i + 1 < len(changes) else end
            ax.broken_barh([(t, stop - t)], (partition - 0.4, 0.8),
                           color=BROKER_COLOURS.get(leader, "#d62728"))  # fmt: skip
            if i:
                ax.text(t, partition, f"e{epoch}", fontsize=6, va="center", color="white")
    ax.set_yticks(sorted(spans))
    ax.set_yticklabels([f"P{p}" for p in sorted(spans)])
    ax.set_ylabel("leader\n(newest epoch)")
