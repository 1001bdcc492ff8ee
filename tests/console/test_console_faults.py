"""The console while a broker stands still (SIGSTOP): it takes connections and answers
nothing. The console keeps polling and serving, says which broker did not answer, and
is whole again once the broker wakes."""

from __future__ import annotations

import re
import signal
import time

import pytest

from partita.client.sync import Admin
from partita.local.cluster import LocalCluster
from tests.console.conftest import ConsoleServer, until

pytestmark = pytest.mark.timeout(180)

PAUSE_S = 12.0  # past the broker's lease, with room for the controller and a poll


def polls(console: ConsoleServer) -> int:
    return int(re.search(r"polls (\d+)", console.get("/healthz")[1])[1])  # type: ignore[index]


def test_a_paused_broker_neither_stalls_the_console_nor_outlives_its_wake(
    console_cluster: LocalCluster, console: ConsoleServer
) -> None:
    with Admin(console_cluster.bootstrap) as admin:
        admin.create_topic("paused", 3, 3)
    until(lambda: 'data-topic="paused"' in console.get("/topics")[1], 20, "the topic listed")
    paused = console_cluster.brokers[0]
    before = polls(console)
    paused.signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        seen_down = False
        while time.monotonic() - started < PAUSE_S:
            asked = time.monotonic()
            status, page = console.get("/cluster")
            assert status == 200 and time.monotonic() - asked < 2.0  # pages never wait on a poll
            # Past its lease the cluster leaves it out: the grid shows it down. (A poll
            # that asked it before that says it did not answer; which poll does is luck.)
            seen_down = seen_down or f"Broker {paused.node_id} (down)" in page
            time.sleep(0.5)
        during = polls(console) - before
    finally:
        paused.signal(signal.SIGCONT)
    # Polls went on (each bounded: a step that waits gives up within its deadline)...
    assert during >= 2, during
    assert seen_down
    # ... and once the broker answers again the pages are whole: no error, no warning.
    until(
        lambda: 'class="banner' not in console.get("/cluster")[1],
        30,
        "the cluster page without an error or warning",
    )
