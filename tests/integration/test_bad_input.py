"""Bad input over raw sockets against a real broker process.

Every case sends something a well-behaved client never would and checks the outcome Kafka
gives: an error code in the response, or the connection closed (recv returns b'') where
Kafka closes it. Every case then checks that the damage stayed on that one connection:

(i)   the broker process is still running;
(ii)  a bystander connection, opened before the bad one, still gets ApiVersions and
      Metadata answered;
(iii) records produced before the test (by confluent-kafka) still consume intact (kcat);
(iv)  the broker logged it: a warning naming the connection (its client port) or the
      topic, and no error or traceback anywhere in what the test made the broker log.
"""

from __future__ import annotations

import os
import random
import re
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from partita.protocol.api import SUPPORTED, ApiKey
from partita.protocol.records import Record, build_batch
from tests.integration.conftest import BrokerProcess

TIMEOUT = 5.0
DEFAULT_MAX_REQUEST = 100 * 1024 * 1024  # socket.request.max.bytes default
TS = 1_700_000_000_000

NONE = 0
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC = 17
INVALID_REQUIRED_ACKS = 21
UNSUPPORTED_VERSION = 35
INVALID_RECORD = 87

_Topic = ProduceRequest.TopicProduceData
_Partition = _Topic.PartitionProduceData


# -- raw protocol helpers -----------------------------------------------------------------


def connect(broker: BrokerProcess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT)
    sock.settimeout(TIMEOUT)
    return sock


def encode(request: Any, correlation_id: int, client_id: str = "bad-input-test") -> bytes:
    """A request frame with its size prefix."""
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    frame = bytes(request.encode(header=True))
    return struct.pack(">i", len(frame)) + frame


def sized(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


def recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def recv_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    return recv_exact(sock, size)


def roundtrip(sock: socket.socket, request: Any, response_class: Any, correlation_id: int) -> Any:
    sock.sendall(encode(request, correlation_id))
    response = response_class.decode(recv_frame(sock), version=request.API_VERSION, header=True)
    assert response.header.correlation_id == correlation_id
    return response


def expect_closed(sock: socket.socket) -> None:
    """The broker closes the connection without answering: EOF (or a reset)."""
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        return
    except TimeoutError:
        pytest.fail(f"the broker kept the connection open for {TIMEOUT}s instead of closing it")
    assert data == b"", f"expected the connection to be closed, got a response: {data[:64]!r}"


def api_versions(version: int = 3) -> Any:
    return ApiVersionsRequest(
        version=version, client_software_name="bad-input", client_software_version="1"
    )


def metadata(topics: list[str] | None, version: int = 9) -> Any:
    return MetadataRequest(
        version=version,
        topics=None
        if topics is None
        else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
        allow_auto_topic_creation=False,
    )


def produce(
    topic: str, records: bytes | None, *, acks: int = 1, version: int = 7, partition: int = 0
) -> Any:
    return ProduceRequest(
        version=version,
        transactional_id=None,
        acks=acks,
        timeout_ms=5000,
        topic_data=[
            _Topic(name=topic, partition_data=[_Partition(index=partition, records=records)])
        ],
    )


def produce_errors(sock: socket.socket, request: Any, correlation_id: int = 77) -> list[int]:
    response = roundtrip(sock, request, ProduceResponse, correlation_id)
    return [p.error_code for t in response.responses for p in t.partition_responses]


def end_offset(broker: BrokerProcess, topic: str, partition: int = 0) -> int:
    lo = ListOffsetsRequest
    request = lo(
        version=1,
        replica_id=-1,
        topics=[
            lo.ListOffsetsTopic(
                name=topic,
                partitions=[
                    lo.ListOffsetsTopic.ListOffsetsPartition(
                        partition_index=partition, timestamp=-1
                    )
                ],
            )
        ],
    )
    with connect(broker) as sock:
        response = roundtrip(sock, request, ListOffsetsResponse, 5)
    result = response.topics[0].partitions[0]
    assert result.error_code == NONE
    return int(result.offset)


def batch(n: int = 3, value_size: int = 8, tag: str = "ok") -> bytes:
    return build_batch(
        [
            Record(
                i, TS + i, f"{tag}-k{i}".encode(), f"{tag}-v{i}".encode().ljust(value_size, b".")
            )
            for i in range(n)
        ]
    )


# -- real clients ------------------------------------------------------------------------


def create_topic(
    broker: BrokerProcess, name: str, partitions: int = 1, config: dict[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, partitions, 1, config=config or {})], request_timeout=10
    )
    futures[name].result(10)


def consume(broker: BrokerProcess, topic: str) -> list[str]:
    """partition:offset:key=value of every record, read by kcat from the beginning."""
    result = subprocess.run(
        [
            "kcat",
            "-b",
            broker.bootstrap,
            "-C",
            "-t",
            topic,
            "-e",
            "-q",
            "-X",
            "fetch.wait.max.ms=5",
            "-f",
            "%p:%o:%k=%s\\n",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return sorted(result.stdout.splitlines())


def seed(broker: BrokerProcess, topic: str = "intact") -> list[str]:
    """Create ``topic`` with 3 partitions, produce 9 records with confluent-kafka."""
    create_topic(broker, topic, partitions=3)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    errors: list[Any] = []
    for i in range(9):
        producer.produce(
            topic,
            key=f"key-{i}",
            value=f"value-{i}-" + "x" * (i * 7),
            partition=i % 3,
            headers=[("h", b"%d" % i)],
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
    assert producer.flush(10) == 0
    assert not errors
    expected = consume(broker, topic)
    assert len(expected) == 9
    return expected


# -- the four checks every test makes -----------------------------------------------------

_LEVEL = re.compile(r"\[(debug|info|warning|error|critical)\s*\]")


@dataclass
class Guard:
    broker: BrokerProcess
    expected: list[str]
    bystander: socket.socket
    log_mark: int
    _correlation: int = field(default=1000)

    def new_log(self) -> str:
        return self.broker.logs()[self.log_mark :]

    def _lines(self, levels: tuple[str, ...]) -> list[str]:
        lines = []
        for line in self.new_log().splitlines():
            match = _LEVEL.search(line)
            if match and match.group(1) in levels:
                lines.append(line)
        return lines

    def verify(
        self, mentions: str | list[str] | None, levels: tuple[str, ...] = ("warning",)
    ) -> None:
        """(i)-(iv). ``mentions``: text one new log line at ``levels`` must contain (one of
        them, for a list), or None where no log line is owed (a client merely going away)."""
        # (i) the broker process is alive
        assert self.broker.proc is not None
        assert self.broker.proc.poll() is None, f"broker exited:\n{self.new_log()}"
        # (ii) the bystander connection still works
        self._correlation += 1
        response = roundtrip(self.bystander, api_versions(), ApiVersionsResponse, self._correlation)
        assert response.error_code == NONE
        self._correlation += 1
        response = roundtrip(
            self.bystander, metadata(["intact"]), MetadataResponse, self._correlation
        )
        assert [(t.name, t.error_code, len(t.partitions)) for t in response.topics] == [
            ("intact", NONE, 3)
        ]
        # (iii) data produced earlier is intact
        assert consume(self.broker, "intact") == self.expected
        # (iv) nothing logged as an error, and the bad input logged
        wanted = [mentions] if isinstance(mentions, str) else (mentions or [])
        deadline = time.monotonic() + (1.5 if wanted else 0.2)
        found = False
        while not found and time.monotonic() < deadline:
            time.sleep(0.05)
            found = any(w in line for line in self._lines(levels) for w in wanted)
        log = self.new_log()
        errors = self._lines(("error", "critical"))
        assert not errors and "Traceback" not in log, (
            f"the broker logged an error for bad input:\n{log[-4000:]}"
        )
        if wanted and not found:
            pytest.fail(
                f"no {'/'.join(levels)} log line mentions any of {wanted}; "
                f"the broker logged:\n{log[-4000:]}"
            )


def open_guard(broker: BrokerProcess, expected: list[str]) -> Guard:
    bystander = connect(broker)
    response = roundtrip(bystander, api_versions(), ApiVersionsResponse, 1)
    assert response.error_code == NONE
    return Guard(broker, expected, bystander, len(broker.logs()))


@dataclass
class Shared:
    broker: BrokerProcess
    expected: list[str]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    broker = BrokerProcess(tmp_path_factory.mktemp("bad-input") / "data")
    broker.start()
    try:
        yield Shared(broker, seed(broker))
    finally:
        broker.close()


@pytest.fixture
def guard(shared: Shared) -> Iterator[Guard]:
    g = open_guard(shared.broker, shared.expected)
    yield g
    g.bystander.close()


def port_of(sock: socket.socket) -> str:
    """How the broker's log names this connection: its client port."""
    return str(sock.getsockname()[1])


# -- malformed frames: Kafka closes the connection ----------------------------------------

_rng = random.Random(20240611)

GARBAGE = {
    "empty-frame": b"",
    "three-bytes": b"\x00\x03\x00",
    "all-ff": b"\xff" * 64,
    "client-id-past-end": b"\x00\x03\x00\x01\x00\x00\x00\x09\x7f\xff" + b"abc",
    "metadata-huge-array": b"\x00\x03\x00\x01\x00\x00\x00\x09\xff\xff\x7f\xff\xff\xff\x00",
    "fetch-v12-endless-varint": b"\x00\x01\x00\x0c\x00\x00\x00\x09\xff\xff" + b"\xff" * 30,
    "random": bytes(_rng.getrandbits(8) for _ in range(200)),
    # Null (-1) counts for arrays that are not nullable: Kafka's reader refuses them.
    "produce-null-topic-data": b"\x00\x00\x00\x07\x00\x00\x00\x09\xff\xff"
    + struct.pack(">hhii", -1, 1, 100, -1),
    "create-topics-null-topics": b"\x00\x13\x00\x02\x00\x00\x00\x09\xff\xff"
    + struct.pack(">iib", -1, 0, 0),
}


@pytest.mark.parametrize("body", list(GARBAGE.values()), ids=list(GARBAGE))
def test_garbage_frame_closes_the_connection(guard: Guard, body: bytes) -> None:
    with connect(guard.broker) as sock:
        port = port_of(sock)
        sock.sendall(sized(body))
        expect_closed(sock)
    guard.verify(port)


def test_negative_lengths_below_minus_one_read_as_empty(guard: Guard) -> None:
    """A known difference from Kafka: kafka-python's decoder reads a length below -1 as
    an empty array (or a null string), so this garbage Produce body is an empty request,
    answered with an empty response rather than by closing the connection. Nothing is
    written and the broker stays healthy."""
    body = b"\x00\x00\x00\x07\x00\x00\x00\x09\xff\xff" + b"\xa5" * 40
    with connect(guard.broker) as sock:
        port_of(sock)
        sock.sendall(sized(body))
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            data = b""
        assert data in (b"", bytes.fromhex("0000000c0000000900000000") + b"\x00" * 4)
    guard.verify(None)


@pytest.mark.parametrize("size", [DEFAULT_MAX_REQUEST + 1, 2**31 - 1, -1, -(2**31)], ids=str)
def test_oversized_or_negative_size_prefix_closes_the_connection(guard: Guard, size: int) -> None:
    with connect(guard.broker) as sock:
        port = port_of(sock)
        sock.sendall(struct.pack(">i", size) + b"\x00" * 100)
        expect_closed(sock)  # at once, without waiting for a body that will never come
    guard.verify(port)


def test_request_over_a_small_socket_request_max_bytes(broker_factory: Any) -> None:
    broker = broker_factory(settings={"socket.request.max.bytes": "1024"})
    broker.start()
    g = open_guard(broker, seed(broker))
    try:
        # A request of exactly the limit is served...
        request = api_versions()
        length = 1000
        while True:
            request.client_software_name = "n" * length
            frame = encode(request, 3)
            if len(frame) == 4 + 1024:
                break
            length += 4 + 1024 - len(frame)
        with connect(broker) as sock:
            sock.sendall(frame)
            response = ApiVersionsResponse.decode(recv_frame(sock), version=3, header=True)
            assert response.error_code == NONE
        # ...one byte more closes that connection only.
        request.client_software_name += "n"
        with connect(broker) as sock:
            port = port_of(sock)
            sock.sendall(encode(request, 4))
            expect_closed(sock)
        g.verify(port)
    finally:
        g.bystander.close()


@pytest.mark.parametrize(
    "bad",
    [b"\x00\x00\x00\x04\xff\xff\xff\xff", struct.pack(">i", DEFAULT_MAX_REQUEST + 1)],
    ids=["garbage-frame", "oversized-prefix"],
)
def test_request_pipelined_before_a_bad_frame_is_answered(guard: Guard, bad: bytes) -> None:
    """Kafka reads one request at a time, so a valid request sent ahead of a bad frame in
    the same TCP segment is answered before the connection is closed."""
    with connect(guard.broker) as sock:
        port = port_of(sock)
        sock.sendall(encode(api_versions(), 11) + bad)
        try:
            frame = recv_frame(sock)
        except ConnectionError as exc:
            pytest.fail(f"the valid request ahead of the bad frame got no answer: {exc}")
        response = ApiVersionsResponse.decode(frame, version=3, header=True)
        assert (response.header.correlation_id, response.error_code) == (11, NONE)
        expect_closed(sock)
    guard.verify(port)


# -- unknown APIs and versions ------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_key", "version"),
    [(999, 0), (-1, 0), (3, 99), (0, 2), (1, 99), (3, -1)],
    ids=["api-999", "api-minus-1", "metadata-v99", "produce-v2", "fetch-v99", "metadata-v-1"],
)
def test_unknown_api_or_unsupported_version_closes_the_connection(
    guard: Guard, api_key: int, version: int
) -> None:
    with connect(guard.broker) as sock:
        port = port_of(sock)
        header = struct.pack(">hhih", api_key, version, 21, 4) + b"test"
        sock.sendall(sized(header + b"\x00" * 16))
        expect_closed(sock)
    guard.verify(port)


def test_api_versions_too_new_gets_a_v0_unsupported_version_answer(guard: Guard) -> None:
    with connect(guard.broker) as sock:
        header = struct.pack(">hhih", 18, 99, 31, 4) + b"test"
        sock.sendall(sized(header + b"\x00\x05hello\x00"))
        frame = recv_frame(sock)
        (correlation_id,) = struct.unpack(">i", frame[:4])
        assert correlation_id == 31
        response = ApiVersionsResponse.decode(frame[4:], version=0)
        assert response.error_code == UNSUPPORTED_VERSION
        advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert advertised == {
            key: (spec.min_version, spec.max_version) for key, spec in SUPPORTED.items()
        }
        # KIP-511: the client retries on the same connection with a version we speak.
        response = roundtrip(sock, api_versions(), ApiVersionsResponse, 32)
        assert response.error_code == NONE
    # An ApiVersions newer than the broker is routine (a newer client), so it is logged
    # but need not be a warning.
    guard.verify(["ApiVersions", "API_VERSIONS", "api key 18"], levels=("info", "warning"))


# -- truncated and half-sent requests -----------------------------------------------------


def test_truncated_produce_body_closes_the_connection(guard: Guard) -> None:
    topic = "bad-truncated"
    create_topic(guard.broker, topic)
    frame = encode(produce(topic, batch()), 41)[4:]
    with connect(guard.broker) as sock:
        port = port_of(sock)
        sock.sendall(sized(frame[:-20]))  # consistent size prefix, body cut short
        expect_closed(sock)
    assert end_offset(guard.broker, topic) == 0
    guard.verify(port)


def test_half_sent_frame_then_client_closes(guard: Guard) -> None:
    topic = "bad-half-sent"
    create_topic(guard.broker, topic)
    frame = encode(produce(topic, batch()), 42)
    with connect(guard.broker) as sock:
        port = port_of(sock)
        sock.sendall(frame[: len(frame) // 2])
        time.sleep(0.1)
    assert end_offset(guard.broker, topic) == 0
    guard.verify(port)


def test_client_that_sends_nothing_and_leaves(guard: Guard) -> None:
    for _ in range(3):
        with connect(guard.broker):
            time.sleep(0.05)
    # A connect-and-go is what TCP health checks do: nothing is owed to the log.
    guard.verify(None)


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_many_connections_opened_and_closed_quickly(guard: Guard) -> None:
    assert guard.broker.proc is not None
    pid = guard.broker.proc.pid
    before = _open_fds(pid)
    socks = [connect(guard.broker) for _ in range(200)]
    for i, sock in enumerate(socks):
        if i % 3 == 0:  # abortive close: RST instead of FIN
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif i % 3 == 1:
            sock.sendall(b"\x00\x00")  # half a size prefix
        sock.close()
    for _ in range(200):
        with connect(guard.broker):
            pass
    deadline = time.monotonic() + 5
    while _open_fds(pid) > before + 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _open_fds(pid) <= before + 2, "the broker kept closed connections open"
    guard.verify(None)


# -- produce requests with bad records: Kafka answers with an error code ------------------


@pytest.mark.parametrize("version", [7, 9])
def test_corrupt_batch_is_refused_and_nothing_appended(guard: Guard, version: int) -> None:
    topic = f"bad-corrupt-v{version}"
    create_topic(guard.broker, topic)
    good = batch(tag=f"v{version}")
    corrupt = bytearray(good)
    corrupt[-3] ^= 0x01  # a payload byte: the CRC32C no longer matches
    with connect(guard.broker) as sock:
        errors = produce_errors(sock, produce(topic, bytes(corrupt), version=version))
        assert errors == [CORRUPT_MESSAGE]
        assert end_offset(guard.broker, topic) == 0
        # The same batch unharmed is accepted on the same connection.
        assert produce_errors(sock, produce(topic, good, version=version)) == [NONE]
    assert end_offset(guard.broker, topic) == 3
    values = [f"v{version}-v{i}".ljust(8, ".") for i in range(3)]
    assert consume(guard.broker, topic) == [f"0:{i}:v{version}-k{i}={values[i]}" for i in range(3)]
    guard.verify(topic)


def test_corrupt_batch_with_acks_0_closes_the_connection(guard: Guard) -> None:
    """With acks=0 there is no response to carry the error, so Kafka closes the connection
    to tell the producer something went wrong (KafkaApis.handleProduceRequest)."""
    topic = "bad-corrupt-acks0"
    create_topic(guard.broker, topic)
    corrupt = bytearray(batch())
    corrupt[-3] ^= 0x01
    with connect(guard.broker) as sock:
        # An ApiVersions right behind it tells "kept open" (answered) from "closed" (EOF).
        sock.sendall(
            encode(produce(topic, bytes(corrupt), acks=0), 51) + encode(api_versions(), 52)
        )
        expect_closed(sock)
    assert end_offset(guard.broker, topic) == 0
    guard.verify(topic)


def test_batch_over_max_message_bytes_is_refused(guard: Guard) -> None:
    topic = "bad-too-large"
    create_topic(guard.broker, topic, config={"max.message.bytes": "1024"})
    with connect(guard.broker) as sock:
        errors = produce_errors(sock, produce(topic, batch(n=2, value_size=800)))
        assert errors == [MESSAGE_TOO_LARGE]
        assert end_offset(guard.broker, topic) == 0
        assert produce_errors(sock, produce(topic, batch(n=2, value_size=100))) == [NONE]
    assert end_offset(guard.broker, topic) == 2
    guard.verify(topic)


# Kafka's answers (ProduceRequest.validateRecords over ByteBufferLogInputStream): magic 0
# and 1 parse as legacy batches and are refused as INVALID_RECORD; a magic above 2 or below
# 0 fails the stream's own check as CORRUPT_MESSAGE.
BAD_MAGIC = {0: INVALID_RECORD, 1: INVALID_RECORD, 3: CORRUPT_MESSAGE, 0x7F: CORRUPT_MESSAGE}
BAD_MAGIC[0xFF] = CORRUPT_MESSAGE  # -1 as a signed byte


@pytest.mark.parametrize(("magic", "code"), list(BAD_MAGIC.items()), ids=str)
def test_batch_with_bad_magic_is_refused(guard: Guard, magic: int, code: int) -> None:
    topic = f"bad-magic-{magic}"
    create_topic(guard.broker, topic)
    bad = bytearray(batch())
    bad[16] = magic  # not covered by the CRC
    with connect(guard.broker) as sock:
        assert produce_errors(sock, produce(topic, bytes(bad))) == [code]
    assert end_offset(guard.broker, topic) == 0
    guard.verify(topic)


# Records holding no complete batch: Kafka finds no batch and answers INVALID_RECORD
# ("must have at least one record batch per partition"), which producers do not retry.
NO_BATCH = {
    "empty": b"",
    "eleven-zero-bytes": b"\x00" * 11,
    "thirty-bytes-no-batch": b"\x01" * 30,
    "batch-header-only": batch()[:61],
    "batch-cut-short": batch()[:-5],
}


@pytest.mark.parametrize("records", list(NO_BATCH.values()), ids=list(NO_BATCH))
def test_records_without_a_complete_batch_are_refused(guard: Guard, records: bytes) -> None:
    topic = f"bad-no-batch-{len(records)}"
    create_topic(guard.broker, topic)
    with connect(guard.broker) as sock:
        assert produce_errors(sock, produce(topic, records)) == [INVALID_RECORD]
    assert end_offset(guard.broker, topic) == 0
    guard.verify(topic)


def test_null_records_are_refused(guard: Guard) -> None:
    """Kafka has no answer of its own for a null records field (it never reaches the batch
    check), so any error code will do: what matters is no crash and nothing appended."""
    topic = "bad-null-records"
    create_topic(guard.broker, topic)
    with connect(guard.broker) as sock:
        (error,) = produce_errors(sock, produce(topic, None))
    assert error != NONE
    assert end_offset(guard.broker, topic) == 0
    guard.verify(topic)


@pytest.mark.parametrize("acks", [5, -2, 2])
def test_invalid_acks_is_refused(guard: Guard, acks: int) -> None:
    topic = f"bad-acks-{acks}"
    create_topic(guard.broker, topic)
    with connect(guard.broker) as sock:
        assert produce_errors(sock, produce(topic, batch(), acks=acks)) == [INVALID_REQUIRED_ACKS]
    assert end_offset(guard.broker, topic) == 0
    guard.verify(topic)


INVALID_NAMES = ["", ".", "..", "bad/name", "bad name", "x" * 250, "tab\there", "ünïcode"]


def test_produce_to_invalid_topic_names(guard: Guard) -> None:
    request = ProduceRequest(
        version=7,
        transactional_id=None,
        acks=1,
        timeout_ms=5000,
        topic_data=[
            _Topic(name=name, partition_data=[_Partition(index=0, records=batch())])
            for name in INVALID_NAMES
        ],
    )
    with connect(guard.broker) as sock:
        response = roundtrip(sock, request, ProduceResponse, 61)
        got = {t.name: [p.error_code for p in t.partition_responses] for t in response.responses}
        assert set(got) == set(INVALID_NAMES)
        for name, codes in got.items():
            assert codes in ([UNKNOWN_TOPIC_OR_PARTITION], [INVALID_TOPIC]), (name, codes)
        # Nothing was created on the way.
        listed = roundtrip(sock, metadata(None), MetadataResponse, 62)
        assert not {t.name for t in listed.topics} & set(INVALID_NAMES)
    on_disk = {p.name for p in Path(guard.broker.data_dir).iterdir()}
    assert not on_disk & {f"{name}-0" for name in INVALID_NAMES if "/" not in name}
    guard.verify(["bad/name", "bad name"])


# -- the valid side of the line ------------------------------------------------------------


def test_default_request_of_every_supported_version_is_answered(guard: Guard) -> None:
    """Control: the schema-default request of every advertised API and version is
    answered, and the answer decodes (so the failures above are about the bad input)."""
    with connect(guard.broker) as sock:
        correlation = 100
        for _key, spec in sorted(SUPPORTED.items()):
            for version in range(spec.min_version, spec.max_version + 1):
                correlation += 1
                request = spec.request(version=version)  # Fetch: max_wait_ms=0
                if spec.key == ApiKey.PRODUCE:
                    request.acks = 1  # acks=0 (the default) is never answered
                response = roundtrip(sock, request, spec.response, correlation)
                assert response.version == version, (spec.key.name, version)
    guard.verify(None)
