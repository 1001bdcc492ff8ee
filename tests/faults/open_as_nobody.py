"""Open a data directory as an unprivileged user and report what works, as JSON.

    python -m tests.faults.open_as_nobody DATA_DIR

Started as root (the tests run as root, whom file permissions do not stop), it imports
everything it needs, drops to uid/gid 65534, starts a LogManager on DATA_DIR and probes
every partition directory it finds: lm.get(), a full content check, reads at the first
and last offset, timestamp lookups, an append, and finally the shutdown. Each probe is
reported as "ok" (with a value) or the name and message of the exception it raised.
"""

from __future__ import annotations

import json
import os
import random
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from partita.storage.config import LogConfig
from partita.storage.log_manager import LogManager, parse_partition_dir
from tests.faults.helpers import T0, check_contents, make_batch

NOBODY = 65534
CONFIG = LogConfig(segment_bytes=32 * 1024)


def probe(action: Callable[[], Any]) -> str:
    try:
        return f"ok {action()}"
    except Exception as exc:  # reported, not handled: the parent judges
        return f"{type(exc).__name__}: {exc}"


def main(argv: list[str]) -> int:
    data_dir = Path(argv[0])
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    manager = LogManager(data_dir, lambda _topic: CONFIG)
    report: dict[str, Any] = {"uid": os.getuid(), "startup": probe(manager.startup)}
    report["online"] = sorted(f"{t}-{p}" for t, p in manager.logs)
    report["offline"] = {f"{t}-{p}": reason for (t, p), reason in manager.offline.items()}
    partitions: dict[str, dict[str, str]] = {}
    for name in sorted(os.listdir(data_dir)):
        tp = parse_partition_dir(name)
        if tp is None:
            continue
        found = partitions[name] = {"get": probe(lambda tp=tp: manager.get(*tp).name)}
        if tp not in manager.logs:
            continue
        log = manager.logs[tp]
        leo = log.log_end_offset
        found["contents"] = probe(lambda log=log: check_contents(log).log_end_offset)
        found["read_first"] = probe(lambda log=log, leo=leo: log.read(0, 1, max_offset=leo))
        found["read_last"] = probe(lambda log=log, leo=leo: log.read(leo - 1, 1, max_offset=leo))
        found["offset_for_timestamp"] = probe(
            lambda log=log, leo=leo: log.offset_for_timestamp(T0 - 1, max_offset=leo)
        )
        found["max_timestamp_offset"] = probe(log.max_timestamp_offset)
        found["append"] = probe(
            lambda log=log, leo=leo: (
                log.append_as_leader(
                    make_batch(leo, random.Random(leo), max_bytes=2000), 9
                ).first_offset
            )
        )
    report["partitions"] = partitions
    report["shutdown"] = probe(manager.shutdown)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception:
        traceback.print_exc()
        sys.exit(2)
