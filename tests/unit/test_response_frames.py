"""The client's response receiver cuts frames out of arbitrary reads, big and small."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partita.client.connection import ConnectionLostError, ResponseFrames
from partita.protocol.frames import FrameReceiver


def _receive(stream: bytes, reads: list[int]) -> list[bytes]:
    """Feed ``stream`` to a receiver the way a buffered protocol does: ask for a buffer,
    fill at most as much of it as the next read brings."""
    receiver = FrameReceiver()
    frames: list[bytes] = []
    pos = 0
    sizes = iter(reads)
    while pos < len(stream):
        buffer = receiver.buffer()
        assert len(buffer) > 0
        size = min(next(sizes, 1 << 20), len(buffer), len(stream) - pos)
        buffer[:size] = stream[pos : pos + size]
        frames += [bytes(frame) for frame in receiver.received(size)]
        pos += size
    return frames


def _protocol_receive(stream: bytes) -> list[bytes]:
    """The same through the client's asyncio protocol, in one read."""

    async def run() -> list[bytes]:
        frames: list[bytes] = []
        protocol = ResponseFrames(lambda frame: frames.append(bytes(frame)))
        buffer = protocol.get_buffer(-1)
        buffer[: len(stream)] = stream
        protocol.buffer_updated(len(stream))
        return frames

    return asyncio.run(run())


def _framed(bodies: list[bytes]) -> bytes:
    return b"".join(len(body).to_bytes(4, "big") + body for body in bodies)


# Sizes around the shared buffer (256 KiB) and the own-buffer threshold (64 KiB).
sizes = st.one_of(
    st.integers(4, 300),
    st.integers(60 * 1024, 70 * 1024),
    st.integers(250 * 1024, 300 * 1024),
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(sizes, min_size=1, max_size=12),
    st.lists(st.one_of(st.integers(1, 7), st.integers(1, 300_000)), max_size=400),
)
def test_frames_come_out_whole_and_in_order(frame_sizes: list[int], reads: list[int]) -> None:
    bodies = [bytes([i % 251]) * size for i, size in enumerate(frame_sizes)]
    assert _receive(_framed(bodies), reads) == bodies


def test_many_small_frames_in_one_read_then_a_big_one_split_everywhere() -> None:
    small = [b"abcd" + bytes([i % 256]) * 10 for i in range(1000)]  # 18 KB in total
    big = b"\x07" * (3 * 1024 * 1024)
    stream = _framed([*small, big, b"tail"])
    assert _receive(stream, [len(stream) // 2, 3, 1, 65_536] * 100) == [*small, big, b"tail"]


def test_the_protocol_hands_frames_on_and_refuses_one_without_a_correlation_id() -> None:
    assert _protocol_receive(_framed([b"abcd", b"efghij"])) == [b"abcd", b"efghij"]
    with pytest.raises(ConnectionLostError, match="response of 2 bytes has no header"):
        _protocol_receive(b"\x00\x00\x00\x02ab")
    with pytest.raises(ConnectionLostError, match="announced a size of -5"):
        _protocol_receive((-5).to_bytes(4, "big", signed=True))


def test_a_frame_cut_by_the_end_of_the_shared_buffer_survives_the_move_to_its_front() -> None:
    # 14-byte frames never end exactly at 256 KiB, so a full buffer always ends in part
    # of one; it must be carried to the front, not dropped.
    small = [i.to_bytes(10, "big") for i in range(60_000)]
    assert _receive(_framed(small), [1 << 20] * 10) == small
