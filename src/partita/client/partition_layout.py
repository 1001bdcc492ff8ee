"""Who leads and who follows what, one line per broker, as the seeds draw it:
``Broker 1: P0-Leader | P1-Follower | P2-Follower (out of sync)``.

``partita cluster describe`` and ``partita pipeline --brokers N`` print it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from partita.client.admin import TopicDescription


def broker_lines(
    node_ids: Iterable[int],
    described: list[TopicDescription],
    *,
    with_topic: bool = True,
    down: Collection[int] = (),
) -> list[str]:
    """One line per broker: the partitions it leads, then follows, in partition order
    (internal topics left out). A follower outside the ISR is marked out of sync; a
    broker in ``down`` is shown as down, with the replicas it holds."""
    lines = []
    for node in node_ids:
        cells = []
        for topic in described:
            if topic.internal:
                continue
            prefix = f"{topic.name}/" if with_topic else ""
            for p in topic.partitions:
                if node == p.leader:
                    cells.append(f"{prefix}P{p.partition}-Leader")
                elif node in p.replicas:
                    sync = "" if node in p.isr else " (out of sync)"
                    cells.append(f"{prefix}P{p.partition}-Follower{sync}")
        if node in down:
            held = [
                f"{t.name}/P{p.partition}" if with_topic else f"P{p.partition}"
                for t in described
                if not t.internal
                for p in t.partitions
                if node in p.replicas
            ]
            lines.append(f"Broker {node}: down (replica of {' '.join(held) or 'nothing'})")
        else:
            lines.append(f"Broker {node}: " + (" | ".join(cells) or "-"))
    return lines


def leaderless(described: list[TopicDescription], *, with_topic: bool = True) -> list[str]:
    """The partitions no broker leads."""
    return [
        f"{t.name}/P{p.partition}" if with_topic else f"P{p.partition}"
        for t in described
        for p in t.partitions
        if p.leader < 0
    ]
