"""Data safety (issue 22): what must never happen to a data directory, tried with real
broker processes, the real ``partita`` command and real clients."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests.integration.clients import consume_all, create_topic, produce
from tests.integration.conftest import BrokerProcess

PARTITA = [sys.executable, "-m", "partita.cli.main"]


def partita(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PARTITA, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def restart(broker: BrokerProcess) -> None:
    """Start a stopped broker again on any free port: its old one may have been taken
    meanwhile by another process on this machine."""
    broker.port = 0
    broker.start(timeout=120)


def start_second_broker(data_dir: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``partita broker`` on a directory another broker uses; it must stop by itself."""
    args = [*PARTITA, "broker", "--data-dir", str(data_dir), "--listen", "127.0.0.1:0"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(
            f"a second broker on {data_dir} kept running:\n{err[-2000:]}"
        ) from None
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


# -- one broker per data directory ------------------------------------------------


def test_second_broker_on_a_data_dir_refuses_to_start(
    broker_factory: type[BrokerProcess],
) -> None:
    first = broker_factory()
    first.start()
    assert first.proc is not None
    create_topic(first.bootstrap, "kept")
    values = [f"before-{i}".encode() for i in range(200)]
    produce(first.bootstrap, "kept", [{"value": v} for v in values])

    second = start_second_broker(first.data_dir)

    assert second.returncode != 0
    lines = [line for line in second.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, second.stderr
    assert str(first.data_dir) in lines[0]
    assert f"pid {first.proc.pid}" in lines[0]
    assert "Traceback" not in second.stderr
    assert (first.data_dir / ".lock").read_text().strip() == str(first.proc.pid)

    # The first broker was not disturbed: it still takes writes, stops cleanly, and
    # everything it acknowledged is there after a restart.
    more = [f"after-{i}".encode() for i in range(200)]
    produce(first.bootstrap, "kept", [{"value": v} for v in more])
    assert first.stop() == 0
    assert "failed" not in first.logs()
    restart(first)
    got = consume_all(first.bootstrap, "kept", [0], expected=400)
    assert [m.value() for m in got] == values + more


def test_lock_dies_with_a_killed_broker(broker_factory: type[BrokerProcess]) -> None:
    first = broker_factory()
    first.start()
    create_topic(first.bootstrap, "kept")
    produce(first.bootstrap, "kept", [{"value": b"v"}])
    first.kill()  # kill -9: no shutdown code runs, the kernel drops the lock

    again = broker_factory()  # same data dir
    again.start()
    assert again.proc is not None
    assert (again.data_dir / ".lock").read_text().strip() == str(again.proc.pid)
    assert len(consume_all(again.bootstrap, "kept", [0], expected=1)) == 1


def test_another_nodes_data_dir_is_refused_before_a_log_is_opened(
    broker_factory: type[BrokerProcess],
) -> None:
    """meta.properties names the node a directory belongs to; a broker started on it with
    another --node-id stops with one line, and the directory is left as it was."""
    first = broker_factory()
    first.start()
    create_topic(first.bootstrap, "kept")
    produce(first.bootstrap, "kept", [{"value": b"v"}])
    assert first.stop() == 0
    before = (first.data_dir / "meta.properties").read_text()
    other = partita(
        "broker", "--node-id", "2", "--data-dir", str(first.data_dir), "--listen", "127.0.0.1:0",
        timeout=60,
    )  # fmt: skip
    assert other.returncode == 1
    lines = [line for line in other.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "belongs to node 0, not node 2" in lines[0], other.stderr
    assert (first.data_dir / "meta.properties").read_text() == before
    restart(first)
    assert len(consume_all(first.bootstrap, "kept", [0], expected=1)) == 1


# -- internal topics ----------------------------------------------------------------


def commit_offset(bootstrap: str, group: str, topic: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def committed_offset(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (tp,) = consumer.committed([TopicPartition(topic, 0)], timeout=15)
        return int(tp.offset)
    finally:
        consumer.close()


def test_clients_cannot_produce_to_internal_topics(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "orders")
    commit_offset(broker.bootstrap, "billing", "orders", 7)  # creates __consumer_offsets

    producer = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0})
    errors: list[Any] = []
    producer.produce(
        "__consumer_offsets",
        key=b"not an offset key",
        value=b"junk",
        partition=0,
        on_delivery=lambda err, _msg: errors.append(err),
    )
    assert producer.flush(30) == 0
    assert len(errors) == 1 and errors[0] is not None, errors
    assert errors[0].code() == KafkaError.TOPIC_EXCEPTION  # INVALID_TOPIC_EXCEPTION, 17
    del producer

    # The coordinator's own writes go on, and nothing foreign is found at the restart.
    commit_offset(broker.bootstrap, "billing", "orders", 9)
    assert broker.stop() == 0
    restart(broker)
    assert committed_offset(broker.bootstrap, "billing", "orders") == 9
    assert "unreadable __consumer_offsets" not in broker.logs()

    # As in Kafka, the client id AdminUtils uses may write there (repairs by hand).
    admin_producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "client.id": "__admin_client"}
    )
    admin_producer.produce(
        "__consumer_offsets",
        key=b"k",
        value=None,
        partition=0,
        on_delivery=lambda e, _m: errors.append(e),
    )
    assert admin_producer.flush(30) == 0
    assert errors[1:] == [None]


# -- inspection tools never write -------------------------------------------------


def snapshot(directory: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file under ``directory`` with its size, mtime and content."""
    return {
        str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_log_tools_never_write_a_live_data_dir(broker_factory: type[BrokerProcess]) -> None:
    # No periodic checkpoint while the test compares the files.
    live = broker_factory({"log.flush.offset.checkpoint.interval.ms": "3600000"})
    live.start()
    assert live.proc is not None
    create_topic(live.bootstrap, "events", partitions=2)
    produce(
        live.bootstrap, "events", [{"value": b"x" * 100, "partition": i % 2} for i in range(100)]
    )
    data_dir = live.data_dir
    before = snapshot(data_dir)

    described = partita("log", "describe", str(data_dir))
    segment = data_dir / "events-0" / "00000000000000000000.log"
    dumped = partita("log", "dump", str(segment))

    assert snapshot(data_dir) == before
    assert not (data_dir / ".kafka_cleanshutdown").exists()
    assert described.returncode == 0, described.stderr
    in_use = f"{data_dir} is in use by broker pid {live.proc.pid}"
    assert f"{in_use}; high watermarks shown may be stale" in described.stderr
    assert "events-0" in described.stdout and "events-1" in described.stdout
    assert dumped.returncode == 0, dumped.stderr
    assert in_use in dumped.stderr
    assert "50 batches" in dumped.stdout or "batches" in dumped.stdout

    assert live.stop() == 0
    stopped = snapshot(data_dir)
    described = partita("log", "describe", str(data_dir))
    assert described.returncode == 0, described.stderr
    assert "in use" not in described.stderr
    assert snapshot(data_dir) == stopped
    rows = [line.split("│") for line in described.stdout.splitlines() if "events-" in line]
    ends = {cells[1].strip(): (cells[3].strip(), cells[4].strip()) for cells in rows}
    assert ends == {"events-0": ("50", "50"), "events-1": ("50", "50")}  # high watermark, end


def test_log_describe_reports_a_torn_tail_without_repairing_it(
    broker_factory: type[BrokerProcess],
) -> None:
    stopped = broker_factory()
    stopped.start()
    create_topic(stopped.bootstrap, "events")
    produce(stopped.bootstrap, "events", [{"value": b"v"} for _ in range(10)])
    assert stopped.stop() == 0
    segment = stopped.data_dir / "events-0" / "00000000000000000000.log"
    with segment.open("ab") as f:
        f.write(b"\x00" * 30)  # what a crash in the middle of a write leaves
    before = snapshot(stopped.data_dir)

    described = partita("log", "describe", str(stopped.data_dir))

    assert described.returncode == 0, described.stderr
    assert "30 bytes after the last complete batch" in " ".join(described.stdout.split())
    assert snapshot(stopped.data_dir) == before


# -- partition counts and file descriptors ------------------------------------------


def start_with_descriptor_limit(broker: BrokerProcess, soft: int) -> None:
    broker.descriptor_limit = soft
    restart(broker)


def open_descriptors(broker: BrokerProcess) -> int:
    assert broker.proc is not None
    return len(os.listdir(f"/proc/{broker.proc.pid}/fd"))


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_absurd_partition_count_is_refused_before_anything_is_recorded(
    broker_factory: type[BrokerProcess],
) -> None:
    broker = broker_factory()
    start_with_descriptor_limit(broker, 1024)

    result = partita("topic", "create", "huge", "-p", "100000", "-b", broker.bootstrap)

    assert result.returncode != 0
    error = one_line_error(result)
    # The default limit comes from the descriptor limit: 1,024 less a reserve of 256.
    assert "max.broker.partitions=768" in error and "huge" in error
    assert "huge" not in partita("topic", "list", "-b", broker.bootstrap).stdout
    assert not list(broker.data_dir.glob("huge-*"))
    metadata = broker.data_dir / "partita-metadata-kv.json"
    assert not metadata.exists() or "huge" not in metadata.read_text()
    assert "error" not in broker.logs().lower()

    # The directory is as usable as before: a topic within the limit, a restart.
    create_topic(broker.bootstrap, "small", partitions=8)
    produce(broker.bootstrap, "small", [{"value": b"v", "partition": p} for p in range(8)])
    assert broker.stop() == 0
    start_with_descriptor_limit(broker, 1024)
    assert len(consume_all(broker.bootstrap, "small", list(range(8)), expected=8)) == 8


def test_many_partitions_need_few_descriptors(broker_factory: type[BrokerProcess]) -> None:
    # 512 descriptors keep at most 256 segment files open; the limit is raised past
    # the 256 partitions that default allows.
    broker = broker_factory({"max.broker.partitions": "3000"})
    start_with_descriptor_limit(broker, 512)
    idle = open_descriptors(broker)

    created = partita("topic", "create", "wide", "-p", "1500", "-b", broker.bootstrap)
    assert created.returncode == 0, created.stderr
    assert open_descriptors(broker) <= idle + 5  # created partitions hold no descriptor

    produce(
        broker.bootstrap, "wide", [{"value": str(p).encode(), "partition": p} for p in range(1500)]
    )
    assert open_descriptors(broker) <= 256 + idle + 20
    got = consume_all(broker.bootstrap, "wide", list(range(1500)), expected=1500, timeout=60)
    assert sorted(int(m.value()) for m in got) == list(range(1500))
    assert all(int(m.value()) == m.partition() for m in got)

    assert broker.stop() == 0
    start_with_descriptor_limit(broker, 512)  # loading 1,500 partitions
    assert open_descriptors(broker) <= idle + 5
    deleted = partita("topic", "delete", "wide", "-b", broker.bootstrap)
    assert deleted.returncode == 0, deleted.stderr
    assert not list(broker.data_dir.glob("wide-*"))
    assert broker.stop() == 0
    start_with_descriptor_limit(broker, 512)
    assert "wide" not in partita("topic", "list", "-b", broker.bootstrap).stdout
    assert "error" not in broker.logs().lower()


def test_start_and_delete_whatever_a_create_left(broker_factory: type[BrokerProcess]) -> None:
    broker = broker_factory({"max.broker.partitions": "500"})
    broker.start()
    create_topic(broker.bootstrap, "left", partitions=300)
    assert broker.stop() == 0
    # What a create cut short leaves: the topic recorded, its directories not (all yet).
    for directory in list(broker.data_dir.glob("left-*"))[:200]:
        shutil.rmtree(directory)
    # And a limit lowered below what the broker already holds.
    broker.settings["max.broker.partitions"] = "100"

    restart(broker)
    refused = partita("topic", "create", "more", "-p", "1", "-b", broker.bootstrap)
    assert refused.returncode != 0
    assert "max.broker.partitions=100" in one_line_error(refused)
    deleted = partita("topic", "delete", "left", "-b", broker.bootstrap)
    assert deleted.returncode == 0, deleted.stderr
    assert not list(broker.data_dir.glob("left-*"))
    created = partita("topic", "create", "more", "-p", "1", "-b", broker.bootstrap)
    assert created.returncode == 0, created.stderr
    assert broker.stop() == 0
    restart(broker)
    listed = partita("topic", "list", "-b", broker.bootstrap).stdout
    assert "more" in listed and "left" not in listed


def _api_versions_seconds(bootstrap: str) -> float:
    """One ApiVersions round trip on a new connection: how soon the broker answers."""
    import socket  # noqa: PLC0415
    import struct  # noqa: PLC0415
    import time  # noqa: PLC0415

    host, _, port = bootstrap.rpartition(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        body = struct.pack(">hhih", 18, 0, 1, 4) + b"ping"
        sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        sock.recv(size, socket.MSG_WAITALL)
    return time.monotonic() - started


def test_creating_thousands_of_partitions_keeps_the_broker_answering(
    broker_factory: type[BrokerProcess],
) -> None:
    """Opening 3,000 partitions takes the broker seconds; done in one go it held the
    event loop all along (no request answered, no lease renewed in a cluster). It is
    applied in slices now, and requests are answered in between."""
    import threading  # noqa: PLC0415

    broker = broker_factory({"max.broker.partitions": "5000"})
    broker.start()
    latencies: list[float] = []
    done = threading.Event()

    def probe() -> None:
        while not done.is_set():
            latencies.append(_api_versions_seconds(broker.bootstrap))
            done.wait(0.05)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    try:
        created = partita("topic", "create", "many", "-p", "3000", "-b", broker.bootstrap)
        assert created.returncode == 0, created.stderr
        produce(broker.bootstrap, "many", [{"value": b"last", "partition": 2999}])
    finally:
        done.set()
        prober.join(60)
    assert len(list(broker.data_dir.glob("many-*"))) == 3000
    assert max(latencies) < 1.0, f"the broker did not answer for {max(latencies):.1f} s"


def test_a_topic_deleted_while_its_partitions_are_still_being_opened_is_gone(
    broker_factory: type[BrokerProcess],
) -> None:
    """The delete arrives while the create is applied in slices: it waits its turn, and
    the partitions opened meanwhile go with the topic; none is opened after it."""
    import time  # noqa: PLC0415

    broker = broker_factory({"max.broker.partitions": "5000"})
    broker.start()
    created = partita("topic", "create", "brief", "-p", "3000", "-b", broker.bootstrap)
    assert created.returncode == 0, created.stderr
    assert len(list(broker.data_dir.glob("brief-*"))) < 3000  # still being opened
    deleted = partita("topic", "delete", "brief", "-b", broker.bootstrap)
    assert deleted.returncode == 0, deleted.stderr
    deadline = time.monotonic() + 60
    while list(broker.data_dir.glob("brief-*")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not list(broker.data_dir.glob("brief-*"))
    time.sleep(1)  # nothing opened after the delete
    assert not list(broker.data_dir.glob("brief-*"))
    assert "brief" not in partita("topic", "list", "-b", broker.bootstrap).stdout
    assert "error" not in broker.logs().lower()
