"""The short chaos runs (CI): three hosts (network namespaces), each with a broker and a
member of etcd's quorum (a partition cuts off a whole host); three idempotent acks=all
producers and two consumers, and beside them two transactional clients (read, write,
commit or abort) and a read_committed consumer on a topic of their own; every fault kind
in two runs with fixed seeds; the checker must find nothing. Needs root (network
namespaces, tmpfs). scripts/chaos.sh runs the long version."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.chaos.runner import RunConfig, run

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.timeout(280),
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("ip") is None,
        reason="network namespaces and tmpfs need root and iproute2",
    ),
]


@pytest.mark.parametrize(
    ("seed", "kinds", "rate"),
    [
        # The faster one: a killed leader loses only what its followers had not fetched
        # yet, so a lost-acknowledgement bug shows more readily at a higher rate.
        (11, ["kill", "pause", "partition", "etcd", "etcd-member"], 250.0),
        (12, ["term", "disk", "elect", "reassign", "etcd-leader"], 120.0),
    ],
)
def test_no_violation_under_faults(
    tmp_path: Path, seed: int, kinds: list[str], rate: float
) -> None:
    config = RunConfig(
        tmp_path / "run", seed, seconds=55, kinds=kinds, rate=rate, txn_clients=2, hosts=True
    )
    result = run(config)
    assert result.ok, result.report
    kinds_run = {e.fault for e in result.events if getattr(e, "phase", "") == "start"}
    skipped = [n for n in result.notes if "skipped" in n]
    assert set(kinds) - {"phase"} <= kinds_run or skipped, (kinds, kinds_run)
    # The run did real work: every fault healed and writes acknowledged after each one.
    assert result.figures[0].acks_per_s > 100, result.figures
    assert not [n for n in result.notes if "skipped" not in n], result.notes
    # The transactions did real work too: committed, aborted, and read back.
    assert result.transactions["committed"] > 200, result.transactions
    assert result.transactions["aborted"] > 20, result.transactions
    assert sum(1 for e in result.events if e.kind == "committed-read") > 400
