"""Throughput, p99 latency and unavailability of the chaos workload with no faults and
under each fault kind, one kind at a time on one cluster (tests/chaos/runner.py, phased).

The workload: three idempotent acks=all producers at --rate values/s each over 6
partitions (RF 3, min ISR 2, 3 brokers and etcd in network namespaces, all on this
machine's 2 cores), two consumers reading everything. Each phase repeats its fault
(healed, then the cluster settled, then 3-6 s quiet) for --seconds. Columns:
acks/s over the phase; p50/p99 from send to acknowledgement of the values sent in it;
unavailability: per fault, the longest time one partition went without an acknowledgement
(the quiet row shows the longest such gap with no fault). The checker runs on the whole
history: a violation fails the benchmark.

    sudo .venv/bin/python benchmarks/chaos_bench.py --seconds 45 --seed 3
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.chaos import stats
from tests.chaos.nemesis import KINDS
from tests.chaos.runner import RunConfig, run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=45.0, help="per phase")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--rate", type=float, default=120.0, help="per producer, values/s")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--out", type=Path, default=Path("var/chaos/bench"))
    args = parser.parse_args()
    phases = [("none", args.seconds)] + [(k, args.seconds) for k in args.kinds.split(",") if k]
    started = time.monotonic()
    result = run(RunConfig(args.out.resolve(), args.seed, phases=phases, rate=args.rate))
    print(stats.table(result.figures))
    for note in result.notes:
        print(f"note: {note}")
    print(f"checker: {result.report.splitlines()[0]}")
    print(f"{time.monotonic() - started:.0f} s; history and plot under {args.out}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
