"""Which partition a produced record goes to (sans-IO), as the Java producer decides.

    explicit partition            the record says so
    key, default partitioner      murmur2(key), positive, modulo the partition count
    no key, default partitioner   sticky: stay on one partition until ``batch.size`` bytes
                                  went to it, then switch (KIP-480); with adaptive
                                  partitioning (KIP-794) the next one is drawn with odds
                                  that favour partitions with shorter queues
    round_robin                   every record to the next partition in turn
    custom                        a callable, or an import path (``partitioner.class``)

Keyed routing depends on the partition count: adding partitions moves keys, which is why
the producer warns when it sees a topic grow.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from partita.client.murmur2 import partition_for_key

CustomFunction = Callable[[str, bytes | None, bytes | None, int], int]


class Partitioner(Protocol):
    def partition(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        num_partitions: int,
        available: Sequence[int] = (),
    ) -> int: ...

    def on_append(self, topic: str, partition: int, size: int, num_partitions: int) -> None:
        """Told about every record the producer accepted (sticky partitioning needs it)."""


class _StickyChoice:
    """Per-topic sticky partition for keyless records (Java's BuiltInPartitioner)."""

    def __init__(self, batch_size: int, adaptive: bool, rng: random.Random) -> None:
        self.batch_size = max(batch_size, 1)
        self.adaptive = adaptive
        self.rng = rng
        self.current: dict[str, int] = {}
        self.produced: dict[str, int] = {}
        self.queue_sizes: dict[str, Sequence[int]] = {}

    def partition(self, topic: str, num_partitions: int, available: Sequence[int]) -> int:
        current = self.current.get(topic)
        if current is None or current >= num_partitions:
            current = self._next(topic, num_partitions, available)
            self.current[topic] = current
            self.produced[topic] = 0
        return current

    def on_append(self, topic: str, partition: int, size: int, num_partitions: int) -> None:
        if self.current.get(topic) != partition:
            return
        self.produced[topic] = self.produced.get(topic, 0) + size
        if self.produced[topic] >= self.batch_size:
            # Switch after a full batch's worth, so batches fill up before moving on.
            del self.current[topic]

    def _next(self, topic: str, num_partitions: int, available: Sequence[int]) -> int:
        candidates = [p for p in available if p < num_partitions] or list(range(num_partitions))
        queues = self.queue_sizes.get(topic)
        if self.adaptive and queues and len(queues) >= num_partitions:
            # KIP-794: weight each partition by (longest queue + 1 - its queue).
            longest = max(queues[p] for p in candidates)
            weights = [longest + 1 - queues[p] for p in candidates]
            return self.rng.choices(candidates, weights=weights)[0]
        return self.rng.choice(candidates)


class DefaultPartitioner:
    """Java's default: murmur2 for keyed records, sticky for keyless ones."""

    def __init__(
        self,
        batch_size: int = 16384,
        adaptive: bool = True,
        ignore_keys: bool = False,
        rng: random.Random | None = None,
    ) -> None:
        self.ignore_keys = ignore_keys
        self.sticky = _StickyChoice(batch_size, adaptive, rng or random.Random())

    def partition(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        num_partitions: int,
        available: Sequence[int] = (),
    ) -> int:
        if key is not None and not self.ignore_keys:
            return partition_for_key(key, num_partitions)
        return self.sticky.partition(topic, num_partitions, available)

    def on_append(self, topic: str, partition: int, size: int, num_partitions: int) -> None:
        self.sticky.on_append(topic, partition, size, num_partitions)

    def set_queue_sizes(self, topic: str, sizes: Sequence[int]) -> None:
        """Adaptive partitioning input: bytes waiting per partition of ``topic``."""
        self.sticky.queue_sizes[topic] = sizes


class RoundRobinPartitioner:
    """Java's RoundRobinPartitioner: a counter per topic, over the available partitions
    when some are known to be available."""

    def __init__(self) -> None:
        self.counters: dict[str, int] = {}

    def partition(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        num_partitions: int,
        available: Sequence[int] = (),
    ) -> int:
        n = self.counters.get(topic, 0)
        self.counters[topic] = n + 1
        usable = [p for p in available if p < num_partitions]
        if usable:
            return usable[n % len(usable)]
        return n % num_partitions

    def on_append(self, topic: str, partition: int, size: int, num_partitions: int) -> None:
        return None


class Murmur2Partitioner(DefaultPartitioner):
    """Keys by murmur2 like the default; named for librdkafka's ``murmur2_random``."""


class FunctionPartitioner:
    """A user's callable ``(topic, key, value, num_partitions) -> partition``."""

    def __init__(self, function: CustomFunction) -> None:
        self.function = function

    def partition(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        num_partitions: int,
        available: Sequence[int] = (),
    ) -> int:
        chosen = int(self.function(topic, key, value, num_partitions))
        if not 0 <= chosen < num_partitions:
            raise ValueError(
                f"custom partitioner chose partition {chosen} of topic {topic!r}, which has "
                f"{num_partitions} partitions"
            )
        return chosen

    def on_append(self, topic: str, partition: int, size: int, num_partitions: int) -> None:
        return None


BUILT_IN: dict[str, Callable[[], Partitioner]] = {
    "default": DefaultPartitioner,
    "murmur2": Murmur2Partitioner,
    "murmur2_random": Murmur2Partitioner,
    "sticky": lambda: DefaultPartitioner(ignore_keys=True),
    "uniform_sticky": lambda: DefaultPartitioner(ignore_keys=True),
    "round_robin": RoundRobinPartitioner,
    "roundrobin": RoundRobinPartitioner,
}


def load_partitioner(spec: str | CustomFunction | Partitioner | None) -> Partitioner:
    """A partitioner from a built-in name, an import path (``package.module:Name`` or
    ``package.module.Name``, a class or a function), a callable, or an instance."""
    if spec is None:
        return DefaultPartitioner()
    if not isinstance(spec, str):
        if hasattr(spec, "partition") and hasattr(spec, "on_append"):
            return spec
        return FunctionPartitioner(spec)
    if spec.lower() in BUILT_IN:
        return BUILT_IN[spec.lower()]()
    module_name, sep, attribute = spec.partition(":")
    if not sep:
        module_name, _, attribute = spec.rpartition(".")
    if not module_name or not attribute:
        raise ValueError(
            f"unknown partitioner {spec!r}: use one of {', '.join(sorted(BUILT_IN))} or an "
            "import path like mypackage.routing:by_region"
        )
    try:
        target: Any = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load partitioner {spec!r}: {exc}") from None
    if isinstance(target, type):
        return load_partitioner(target())
    return load_partitioner(target)


def choose_partition(
    partitioner: Partitioner,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    num_partitions: int,
    explicit: int | None = None,
    available: Sequence[int] = (),
) -> int:
    """The producer's rule: an explicit partition wins, if it exists."""
    if explicit is not None:
        if not 0 <= explicit < num_partitions:
            raise ValueError(
                f"partition {explicit} does not exist: topic {topic!r} has {num_partitions}"
            )
        return explicit
    return partitioner.partition(topic, key, value, num_partitions, available)
