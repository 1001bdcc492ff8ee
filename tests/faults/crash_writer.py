"""A writer process for the crash tests: appends verifiable batches until it is killed.

    python -m tests.faults.crash_writer DATA_DIR SEED EPOCH FLUSH_MESSAGES SEGMENT_BYTES

Opens the data directory with a LogManager (recovering it if needed), prints
``READY <log end offset>``, then appends batches forever, printing the last offset of
each append as soon as append_as_leader returns (the offset is then "acknowledged").
Batches are built in bursts ahead of their appends, with the offsets they will get.
Now and then it checkpoints the recovery points and moves to a new leader epoch.
It gives up on its own after a deadline so a lost parent cannot leave it running.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

from partita.protocol.record_batch import read_header
from partita.storage.config import LogConfig
from tests.faults.helpers import TOPIC, make_batch, open_manager

DEADLINE_S = 60.0


def main(argv: list[str]) -> int:
    data_dir = Path(argv[0])
    seed, epoch, flush_messages, segment_bytes = (int(a) for a in argv[1:5])
    config = LogConfig(segment_bytes=segment_bytes, flush_messages=flush_messages)
    manager = open_manager(data_dir, config)
    partition_log = manager.get_or_create(TOPIC, 0)
    out = sys.stdout
    out.write(f"READY {partition_log.log_end_offset}\n")
    out.flush()
    rng = random.Random(seed)
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        # Build a burst of batches first, then append them back to back, so that a kill
        # often lands in the append path rather than in batch building.
        burst = []
        next_offset = partition_log.log_end_offset
        for _ in range(rng.randint(10, 120)):
            batch = make_batch(next_offset, rng)
            burst.append(batch)
            next_offset += read_header(batch).last_offset_delta + 1
        for batch in burst:
            info = partition_log.append_as_leader(batch, epoch)
            out.write(f"{info.last_offset}\n")
            out.flush()
            roll = rng.random()
            if roll < 0.03:
                manager.checkpoint()
            elif roll < 0.04:
                epoch += 1
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
