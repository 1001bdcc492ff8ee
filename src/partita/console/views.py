"""The live part of each page: a template and its context, from the sampler's newest
snapshot. A page renders it once; its stream renders it again after each poll."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from partita.client.admin import PartitionDescription, TopicDescription
from partita.client.partition_layout import broker_lines
from partita.console import charts, hot_keys
from partita.console.history import trend
from partita.console.model import (
    Snapshot,
    Topic,
    broker_loads,
    leader_spread,
    page_of,
    shares,
)
from partita.console.reassign_plans import PlanError
from partita.console.state import Console

GRID_PER_PAGE = 120
ROWS_PER_PAGE = 200
PLAN_ROWS = 500  # a plan's table shows this many partitions; its counts cover them all

View = Callable[[Console, Mapping[str, str]], tuple[str, dict[str, Any]]]


def _page(params: Mapping[str, str]) -> int:
    try:
        return max(1, int(params.get("page", "1")))
    except ValueError:
        return 1


def cluster_view(console: Console, params: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    snap = console.sampler.snapshot
    chosen_topic = params.get("topic", "")
    topic = snap.topic(chosen_topic) if chosen_topic else None
    topics = (topic,) if topic is not None else snap.user_topics
    loads = broker_loads(snap, topics)
    alive = {b.node_id for b in snap.brokers}
    every = [p for t in topics for p in t.partitions]
    columns, page, pages = page_of(every, _page(params), GRID_PER_PAGE)
    return "cluster_live.html", {
        "snap": snap,
        "loads": loads,
        "spread": leader_spread(loads, alive),
        "columns": columns,
        "pages": pages,
        "page": page,
        "topic_filter": chosen_topic,
        "missing_topic": bool(chosen_topic) and topic is None,
        "brokers": snap.broker_ids,
        "alive": alive,
        # The seeds' picture, in words, for one topic small enough to read that way.
        "seeds_lines": seeds_lines(snap, topic) if topic is not None else [],
        "troubled": [
            p for t in snap.user_topics for p in t.partitions if p.offline or p.under_replicated
        ][:50],
    }


def topics_view(console: Console, params: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    snap = console.sampler.snapshot
    shown, page, pages = page_of(snap.topics, _page(params), ROWS_PER_PAGE)
    rows = []
    for t in shown:
        rates = console.sampler.history.rates(t.name)
        record_rates = {p: r for p, (r, _b) in rates.items()}
        rows.append(
            (
                t,
                sum(record_rates.values()),
                sum(b for _r, b in rates.values()),
                # the topic page's rule: what it holds, and what it receives
                any(s.hot for s in shares(t, record_rates)),
            )
        )
    return "topics_live.html", {"snap": snap, "rows": rows, "page": page, "pages": pages}


def topic_view(console: Console, params: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    snap = console.sampler.snapshot
    name = params.get("name", "")
    topic = snap.topic(name)
    context: dict[str, Any] = {"snap": snap, "name": name, "topic": topic}
    if topic is None:
        return "topic_live.html", context
    rates = console.sampler.history.rates(name)
    record_rates = {p: r for p, (r, _b) in rates.items()}
    shown, page, pages = page_of(topic.partitions, _page(params), ROWS_PER_PAGE)
    topic_shares = {s.partition: s for s in shares(topic, record_rates)}
    context.update(
        page=page,
        pages=pages,
        partitions=shown,
        rates=rates,
        shares=topic_shares,
        hot=[s for s in topic_shares.values() if s.hot],
        keys=console.key_samples.get(name),
        remedies=hot_keys.REMEDIES,
        rate_chart=charts.bars(
            "records/s per partition",
            [str(p.partition) for p in shown],
            [round(rates.get(p.partition, (0.0, 0.0))[0], 1) for p in shown],
        ),
        share_chart=charts.bars(
            "share of the topic's records (%)",
            [str(p.partition) for p in shown],
            [round(100 * topic_shares[p.partition].record_share, 1) for p in shown],
        ),
    )
    return "topic_live.html", context


def groups_view(console: Console, params: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    snap = console.sampler.snapshot
    history = console.sampler.history
    rows = [(g, trend(history.lag_series(g.group_id))) for g in snap.groups]
    return "groups_live.html", {"snap": snap, "rows": rows}


def group_view(console: Console, params: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    snap = console.sampler.snapshot
    group_id = params.get("id", "")
    group = snap.group(group_id)
    series = console.sampler.history.lag_series(group_id)
    return "group_live.html", {
        "snap": snap,
        "group_id": group_id,
        "group": group,
        "trend": trend(series),
        "partition_trends": {
            (p.topic, p.partition): trend(
                console.sampler.history.partition_lag_series(group_id, p.topic, p.partition)
            )
            for p in (group.partitions if group is not None else ())
        },
        "lag_chart": charts.line("lag (records) over the last minutes", [float(v) for v in series])
        if len(series) > 1
        else None,
    }


def reassign_view(console: Console, params: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    snap = console.sampler.snapshot
    plan = None
    error = None
    token = params.get("token")
    if token:
        try:
            plan = console.plans.get(token)
        except PlanError as exc:
            error = str(exc)
    rows = []
    done = 0
    started = plan is not None and plan.started_at is not None
    if plan is not None:
        now = {(t.name, p.partition): p for t in snap.topics for p in t.partitions}
        for i, tp in enumerate(plan.changed):
            state = now.get(tp)
            moving = tp in snap.reassignments
            finished = state is not None and not moving and list(state.replicas) == plan.planned[tp]
            done += finished
            if i < PLAN_ROWS:
                result = plan.results.get(tp)
                refused = result[1] or "refused" if result and result[0] else None
                rows.append(
                    (tp, plan.current[tp], plan.planned[tp], state, moving, finished, refused)
                )
    return "reassign_live.html", {
        "snap": snap,
        "plan": plan,
        "plan_error": error,
        "rows": rows,
        "started": started,
        "finished": started and plan is not None and done == len(plan.changed),
        "done_count": done,
        "in_progress": sorted(snap.reassignments.items())[:PLAN_ROWS],
    }


VIEWS: dict[str, View] = {
    "cluster": cluster_view,
    "topics": topics_view,
    "topic": topic_view,
    "groups": groups_view,
    "group": group_view,
    "reassign": reassign_view,
}


SEEDS_LINES_MAX_PARTITIONS = 32


def seeds_lines(snap: Snapshot, topic: Topic) -> list[str]:
    """``Broker 1: P0-Leader | P1-Follower``, one line per broker, as partition_layout
    prints it for ``partita cluster describe``."""
    if len(topic.partitions) > SEEDS_LINES_MAX_PARTITIONS:
        return []
    described = [
        TopicDescription(
            topic.name,
            "",
            topic.internal,
            [
                PartitionDescription(p.partition, p.leader, -1, list(p.replicas), list(p.isr), 0)
                for p in topic.partitions
            ],
        )
    ]
    return broker_lines(snap.broker_ids, described, with_topic=False, down=snap.dead_brokers)
