"""The hottest keys of a topic, from a sample of its newest records.

A key's records all go to one partition (murmur2 of the key), so one key carrying more
than a partition's fair share of the traffic overloads that partition however many the
topic has. The sample reads the newest records of every partition (bounded in records and
time) and ranks keys; the remedies are the seeds' three.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from partita.client.consumer import AsyncConsumer
from partita.client.security import ClientSecurity
from partita.console.model import Topic

SAMPLE_RECORDS = 2000
SAMPLE_PARTITIONS = 200
SAMPLE_BUDGET_S = 3.0
TOP_KEYS = 10
MIN_HOT_RECORDS = 20
SHOWN_KEY_CHARS = 80

REMEDIES = (
    (
        "Salt the key",
        "append a small suffix (key-0 … key-7) so the key's records spread over several "
        "partitions; a reader that needs the key's order merges them by timestamp.",
    ),
    (
        "A custom partitioner",
        "give the hot key partitions of its own and spread the other keys over the rest "
        "(partitioner.class; partita produce --partitioner).",
    ),
    (
        "A dedicated topic",
        "send the hot key's records to a topic of their own, sized for them, so the other "
        "keys keep an even spread.",
    ),
)


@dataclass(frozen=True, slots=True)
class HotKey:
    key: str  # shown as text (escaped by the template), cut to SHOWN_KEY_CHARS
    records: int
    share: float
    hot: bool


@dataclass(frozen=True, slots=True)
class KeySample:
    topic: str
    records: int
    keys: tuple[HotKey, ...]
    taken_at: float

    @property
    def hot(self) -> tuple[HotKey, ...]:
        return tuple(k for k in self.keys if k.hot)


def shown(key: bytes | None) -> str:
    if key is None:
        return "(no key)"
    text = key.decode("utf-8", errors="replace")
    return text if len(text) <= SHOWN_KEY_CHARS else text[:SHOWN_KEY_CHARS] + "…"


def rank(topic: str, keys: Counter[bytes | None], partitions: int, at: float) -> KeySample:
    """The TOP_KEYS most frequent keys; a key is hot when it alone carries at least a
    partition's fair share of the sample (1 / partitions). Records without a key are
    spread by the producer, never hot."""
    total = sum(keys.values())
    fair = 1.0 / max(partitions, 1)
    ranked = []
    for key, count in keys.most_common(TOP_KEYS):
        share = count / total if total else 0.0
        hot = key is not None and partitions > 1 and share >= fair and count >= MIN_HOT_RECORDS
        ranked.append(HotKey(shown(key), count, share, hot))
    return KeySample(topic, total, tuple(ranked), at)


async def sample(
    bootstrap: str, security: ClientSecurity | Mapping[str, str] | None, topic: Topic
) -> KeySample:
    """Read about SAMPLE_RECORDS of the topic's newest records (within SAMPLE_BUDGET_S)
    and rank their keys."""
    total = topic.records
    wanted: dict[tuple[str, int], tuple[int, int]] = {}
    # The partitions holding the most records, at most SAMPLE_PARTITIONS of them: a
    # topic of 10,000 partitions is sampled where its records are.
    holding = sorted(
        (p for p in topic.partitions if p.log_end is not None and p.leader >= 0 and p.records),
        key=lambda p: -p.records,
    )[:SAMPLE_PARTITIONS]
    for p in holding:
        assert p.log_end is not None
        # Each partition gives in proportion to what it holds, so a key's share of the
        # sample is its share of the topic's newest records.
        take = max(1, math.ceil(SAMPLE_RECORDS * p.records / total))
        wanted[(topic.name, p.partition)] = (max(p.log_start or 0, p.log_end - take), p.log_end)
    keys: Counter[bytes | None] = Counter()
    if wanted:
        consumer = AsyncConsumer(
            bootstrap, client_id="partita-console", security=security, enable_auto_commit=False
        )
        remaining = dict(wanted)
        try:
            # The whole read within the budget, connecting included: what was read by
            # then is the sample.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SAMPLE_BUDGET_S):
                    await consumer.start()
                    consumer.assign(list(wanted))
                    for tp, (first, _end) in wanted.items():
                        consumer.seek(tp, first)
                    while remaining:
                        for record in await consumer.getmany(timeout_ms=500):
                            tp = (record.topic, record.partition)
                            if tp in remaining and record.offset < remaining[tp][1]:
                                keys[record.key] += 1
                                if record.offset + 1 >= remaining[tp][1]:
                                    del remaining[tp]
        finally:
            await consumer.stop()
    return rank(topic.name, keys, len(topic.partitions), time.time())
