"""A real cluster for tests: etcd (Debian's etcd-server) and partita brokers as processes
on 127.0.0.1, built by the same classes `partita cluster up` uses."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from partita.local.cluster import BrokerNode, EtcdProcess, LocalCluster

Factory = Callable[..., LocalCluster]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


_FAILED = pytest.StashKey[bool]()


@pytest.fixture
def cluster_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    made: list[LocalCluster] = []

    def make(
        brokers: int = 3, racks: list[str] | None = None, etcd_members: int = 1, **settings: str
    ) -> LocalCluster:
        cluster = LocalCluster(
            tmp_path / f"cluster-{len(made)}",
            brokers,
            racks,
            settings={k.replace("_", "."): v for k, v in settings.items()},
            etcd_members=etcd_members,
        )
        made.append(cluster)
        cluster.start()
        return cluster

    yield make
    if request.node.stash.get(_FAILED, False):
        # A failure on a loaded CI machine is read from its output alone: the brokers'
        # last lines say what each was doing (elections, fetches, ISR changes).
        for cluster in made:
            for broker in cluster.brokers:
                print(f"--- broker {broker.node_id}: {broker.log_path}\n{broker.logs(60)}")
    for cluster in made:
        cluster.kill()


@pytest.fixture
def etcd_member(tmp_path: Path) -> Iterator[EtcdProcess]:
    """One etcd member alone, for tests of partita's etcd client itself."""
    member = EtcdProcess(tmp_path / "etcd")
    member.start()
    try:
        yield member
    finally:
        member.stop()


@pytest.fixture
def cluster(cluster_factory: Factory) -> LocalCluster:
    return cluster_factory(3, ["a", "b", "c"])


def until(condition: Callable[[], Any], timeout: float = 15.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what or condition}")
        time.sleep(0.05)


# -- raw requests, to ask one particular broker -----------------------------------------


def request(broker: BrokerNode, req: Any, response_class: Any, timeout: float = 10.0) -> Any:
    host = broker.host  # 127.0.0.1, or a namespaced broker's own address
    with socket.create_connection((host, broker.port), timeout=timeout) as sock:
        req.with_header(correlation_id=7, client_id="cluster-test")
        frame = bytes(req.encode(header=True))
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", _recv(sock, 4))[0]
        return response_class.decode(_recv(sock, size), version=req.API_VERSION, header=True)


def _recv(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return bytes(out)


def metadata(broker: BrokerNode, topics: list[str] | None = None) -> Any:
    req = MetadataRequest(
        version=12,
        topics=None
        if topics is None
        else [MetadataRequest.MetadataRequestTopic(topic_id=None, name=t) for t in topics],
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    return request(broker, req, MetadataResponse)


def layout(broker: BrokerNode, topic: str) -> dict[int, Any]:
    """partition -> its Metadata entry, as ``broker`` answers."""
    md = metadata(broker, [topic])
    entry = next(t for t in md.topics if t.name == topic)
    return {p.partition_index: p for p in entry.partitions}
