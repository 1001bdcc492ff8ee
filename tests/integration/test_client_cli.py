"""``partita topic``, ``partita produce`` and ``partita consume`` end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from partita.client.murmur2 import partition_for_key
from tests.integration.conftest import BrokerProcess


def partita(
    *args: str, bootstrap: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "partita.cli.main", *args, "-b", bootstrap],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"COLUMNS": "200"},
    )


def test_topic_lifecycle_produce_consume(broker: BrokerProcess, tmp_path: Path) -> None:
    b = broker.bootstrap
    created = partita(
        "topic", "create", "cli", "-p", "3", "-c", "retention.ms=86400000", bootstrap=b
    )
    assert created.returncode == 0, created.stderr
    lines = "".join(f"user{i}:event-{i}\n" for i in range(30))
    produced = partita(
        "produce", "cli", "--key-sep", ":", "-H", "src=test", bootstrap=b, stdin=lines
    )
    assert produced.returncode == 0, produced.stderr
    assert "produced 30 records" in produced.stderr
    source = tmp_path / "more.txt"
    source.write_text("".join(f"line-{i}\n" for i in range(10)))
    from_file = partita("produce", "cli", "-f", str(source), "-p", "2", bootstrap=b)
    assert from_file.returncode == 0, from_file.stderr
    consumed = partita("consume", "cli", "--format", "json", bootstrap=b)
    assert consumed.returncode == 0, consumed.stderr
    records = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert len(records) == 40
    keyed = [r for r in records if r["key"]]
    assert all(r["partition"] == partition_for_key(r["key"].encode(), 3) for r in keyed)
    assert all(r["headers"] == {"src": "test"} for r in keyed)
    assert sorted(r["value"] for r in records if not r["key"]) == sorted(
        f"line-{i}" for i in range(10)
    )
    first_two = partita("consume", "cli", "-p", "2", "-n", "2", "--format", "value", bootstrap=b)
    assert len(first_two.stdout.splitlines()) == 2

    described = partita("topic", "describe", "cli", bootstrap=b)
    assert described.returncode == 0 and "retention.ms" in described.stdout
    grown = partita("topic", "add-partitions", "cli", "--total", "5", bootstrap=b)
    assert grown.returncode == 0 and "keyed records now map" in grown.stdout.replace("\n", " ")
    shrink = partita("topic", "add-partitions", "cli", "--total", "2", bootstrap=b)
    assert shrink.returncode == 1 and "never removed" in shrink.stderr
    altered = partita("topic", "alter", "cli", "--set", "cleanup.policy=compact", bootstrap=b)
    assert altered.returncode == 0, altered.stderr
    assert "compact" in partita("topic", "describe", "cli", bootstrap=b).stdout
    listed = partita("topic", "list", bootstrap=b)
    assert "cli" in listed.stdout
    assert partita("topic", "delete", "cli", bootstrap=b).returncode == 0
    again = partita("topic", "delete", "cli", bootstrap=b)
    assert again.returncode == 1
    assert again.stderr.strip().splitlines()[-1].startswith("error: cannot delete topic")


def test_bad_arguments_are_one_line_errors(broker: BrokerProcess) -> None:
    bad = partita("topic", "create", "x", "-c", "novalue", bootstrap=broker.bootstrap)
    assert bad.returncode == 1 and "key=value" in bad.stderr
    bad_config = partita(
        "topic", "create", "x", "-c", "segment.bytes=abc", bootstrap=broker.bootstrap
    )
    assert bad_config.returncode == 1 and "segment.bytes" in bad_config.stderr
    missing = partita("consume", "nope", bootstrap=broker.bootstrap)
    assert missing.returncode == 1 and "Traceback" not in missing.stderr


def test_consume_with_a_group_resumes_where_it_left_off(broker_factory: object) -> None:
    broker: BrokerProcess = broker_factory(  # type: ignore[operator]
        settings={"group.initial.rebalance.delay.ms": "0"}
    )
    broker.start()
    b = broker.bootstrap
    assert partita("topic", "create", "resume", "-p", "2", bootstrap=b).returncode == 0
    lines = "".join(f"{i}\n" for i in range(10))
    assert partita("produce", "resume", bootstrap=b, stdin=lines).returncode == 0
    first = partita(
        "consume", "resume", "-g", "readers", "-n", "4", "--format", "value", bootstrap=b
    )
    assert first.returncode == 0, first.stderr
    assert len(first.stdout.splitlines()) == 4
    rest = partita("consume", "resume", "-g", "readers", "--format", "value", bootstrap=b)
    assert rest.returncode == 0, rest.stderr
    # Every record exactly once across the two runs: the first commits only what it
    # printed, although it had fetched more.
    got = first.stdout.splitlines() + rest.stdout.splitlines()
    assert sorted(got, key=int) == [str(i) for i in range(10)]
