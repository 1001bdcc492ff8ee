"""The controller's work per broker failure at a scale these machines cannot run (#30):
1,000 brokers and 1,000,000 partitions at RF 3, simulated in memory with the controller's
own rule (``elections.next_state``), no sockets, no etcd.

What it prints:
- the memory of the partition states a broker's image holds (every broker holds all);
- one full planning pass, as ``Controller.plan`` makes at every image change today:
  ``next_state`` for every partition;
- the same failure planned from an index of partitions by broker (what the controller
  would keep to touch only the dead broker's replicas);
- the changes one broker's death makes (leaders moved, ISRs shrunk) and the etcd
  transactions they take (``controller.BATCH`` partitions each).

    .venv/bin/python benchmarks/controller_sim.py [--brokers 1000] [--partitions 1000000]
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from partita.cluster.controller import BATCH
from partita.cluster.elections import next_state
from partita.cluster.model import PartitionState


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=1_000_000)
    args = parser.parse_args()
    brokers, count = args.brokers, args.partitions

    before = rss_mb()
    started = time.perf_counter()
    # Kafka's placement in spirit: consecutive replicas on consecutive brokers, the
    # first replica (the preferred leader) rotating over all of them.
    states = [
        PartitionState(
            [p % brokers, (p + 1 + p // brokers) % brokers, (p + 2 + 2 * (p // brokers)) % brokers],
            p % brokers,
            0,
            [p % brokers, (p + 1 + p // brokers) % brokers, (p + 2 + 2 * (p // brokers)) % brokers],
        )
        for p in range(count)
    ]
    states = [s if len(set(s.replicas)) == 3 else _fix(s, brokers) for s in states]
    built = time.perf_counter() - started
    gc.collect()
    memory = rss_mb() - before
    by_broker: dict[int, list[int]] = defaultdict(list)
    for index, state in enumerate(states):
        for replica in state.replicas:
            by_broker[replica].append(index)

    dead = 7
    registered = set(range(brokers)) - {dead}
    electable = registered
    started = time.perf_counter()
    full = [i for i, s in enumerate(states) if next_state(s, registered, electable) is not s]
    full_pass = time.perf_counter() - started
    started = time.perf_counter()
    indexed = [
        i for i in by_broker[dead] if next_state(states[i], registered, electable) is not states[i]
    ]
    indexed_pass = time.perf_counter() - started
    assert sorted(full) == sorted(indexed)
    led = sum(1 for i in indexed if states[i].leader == dead)

    print(f"{brokers:,} brokers, {count:,} partitions at RF 3 (built in {built:.1f} s)")
    print(f"  partition states in memory: {memory:,.0f} MiB ({memory * 2**20 / count:,.0f} B each)")
    print(f"  broker {dead} dies: {len(indexed):,} partitions change ({led:,} lose their leader, "
          f"{len(indexed) - led:,} shrink their ISR)")  # fmt: skip
    print(f"  etcd transactions to write them: {-(-len(indexed) // BATCH):,} of {BATCH} partitions")
    print(f"  planning pass over every partition (today, per image change): {full_pass:.2f} s")
    print(f"  planning from the index of the dead broker's replicas: {indexed_pass * 1000:.1f} ms")


def _fix(state: PartitionState, brokers: int) -> PartitionState:
    """Three distinct replicas where the rotation collided (small broker counts)."""
    replicas: list[int] = []
    candidate = state.replicas[0]
    while len(replicas) < 3:
        if candidate not in replicas:
            replicas.append(candidate)
        candidate = (candidate + 1) % brokers
    return PartitionState(replicas, replicas[0], 0, list(replicas))


if __name__ == "__main__":
    main()
