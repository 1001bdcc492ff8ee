"""socket.send.buffer.bytes and socket.receive.buffer.bytes set each accepted
connection's SO_SNDBUF and SO_RCVBUF (Kafka's defaults, 100 KiB; -1 leaves them to the
system), as `ss` sees them on the broker's side. Linux doubles what is set."""

from __future__ import annotations

import re
import socket
import struct
import subprocess
from typing import Any

import pytest

from tests.integration.conftest import BrokerProcess


def answered_connection(broker: BrokerProcess) -> socket.socket:
    """A connection the broker has accepted and answered an ApiVersions v0 on: its
    options are set by then (before, the kernel may list it with its defaults)."""
    client = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    client.sendall(struct.pack(">ihhih", 10, 18, 0, 1, 0))  # ApiVersions v0, client id ""
    (size,) = struct.unpack(">i", client.recv(4, socket.MSG_WAITALL))
    assert len(client.recv(size, socket.MSG_WAITALL)) == size
    return client


def broker_side_buffers(broker: BrokerProcess, client: socket.socket) -> tuple[int, int]:
    """(receive, send) buffer sizes of the broker's end of ``client``'s connection."""
    client_port = client.getsockname()[1]
    shown = subprocess.run(
        [
            "ss",
            "-tmnH",
            "state",
            "established",
            f"( sport = :{broker.port} and dport = :{client_port} )",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.search(r"skmem:\(r\d+,rb(\d+),t\d+,tb(\d+)", shown)
    assert found, shown
    return int(found[1]), int(found[2])


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({}, (2 * 102400, 2 * 102400)),
        (
            {"socket.send.buffer.bytes": "65536", "socket.receive.buffer.bytes": "32768"},
            (65536, 131072),
        ),
    ],
)
def test_connections_get_the_configured_socket_buffers(
    broker_factory: Any, settings: dict[str, str], expected: tuple[int, int]
) -> None:
    broker = broker_factory(settings=settings)
    broker.start()
    with answered_connection(broker) as client:
        assert broker_side_buffers(broker, client) == expected


def test_minus_one_leaves_the_buffers_to_the_system(broker_factory: Any) -> None:
    broker = broker_factory(
        settings={"socket.send.buffer.bytes": "-1", "socket.receive.buffer.bytes": "-1"}
    )
    broker.start()
    with answered_connection(broker) as client:
        receive, send = broker_side_buffers(broker, client)
        assert (receive, send) != (2 * 102400, 2 * 102400)
