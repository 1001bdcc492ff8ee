"""Column-wise decoding of fetched batches agrees with the record-by-record decoder."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partita.errors import CorruptRecordError
from partita.protocol.compression import Compression
from partita.protocol.record_columns import decode_columns
from partita.protocol.record_sets import RecordSet, build_producer_batch
from partita.protocol.records import Record, build_batch

BASE_TS = 1_700_000_000_000

records_strategy = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=30)),
        st.one_of(st.none(), st.binary(max_size=9000)),  # crosses 1-, 2- and 3-byte lengths
        st.integers(-100_000, 100_000),
        st.lists(
            st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=200))),
            max_size=3,
        ),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(records_strategy, st.sampled_from(list(Compression)), st.booleans()),
        min_size=1,
        max_size=4,
    ),
    st.data(),
)
def test_columns_match_the_records_in_range(
    batches: list[
        tuple[
            list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes]]]], Compression, bool
        ]
    ],
    data: st.DataObject,
) -> None:
    fetched = b""
    expected: list[tuple[int, bytes | None, bytes | None, int, int, list[Any]]] = []
    offset = 0
    for rows, codec, log_append in batches:
        records = [
            Record(offset + i, BASE_TS + delta, key, value, headers)
            for i, (key, value, delta, headers) in enumerate(rows)
        ]
        batch = build_batch(
            records, base_offset=offset, compression=codec, log_append_time=log_append
        )
        fetched += batch
        max_ts = max(r.timestamp for r in records)
        for r in records:
            ts = max_ts if log_append else r.timestamp
            headers = [{"key": k, "value": v} for k, v in r.headers]
            expected.append((r.offset, r.key, r.value, ts, int(log_append), headers))
        offset += len(records)
    start = data.draw(st.integers(0, offset))
    end = data.draw(st.integers(start, offset + 1))
    wanted = [e for e in expected if start <= e[0] < end]
    # A fetch may end in the middle of a batch: that part is left for the next fetch.
    cut = data.draw(st.integers(0, 60))
    columns, next_offset = decode_columns(fetched + fetched[:cut], start, end, with_headers=True)
    assert next_offset == max(offset, start)
    if not wanted:
        assert columns is None
        return
    assert columns is not None
    assert list(columns.offsets) == [e[0] for e in wanted]
    assert columns.keys.to_pylist() == [e[1] for e in wanted]
    assert columns.values.to_pylist() == [e[2] for e in wanted]
    assert list(columns.timestamps_ms) == [e[3] for e in wanted]
    assert list(columns.timestamp_types) == [e[4] for e in wanted]
    assert list(columns.header_counts) == [len(e[5]) for e in wanted]
    assert columns.headers is not None
    assert columns.headers.to_pylist() == [e[5] for e in wanted]


def test_control_batches_are_skipped_and_damage_is_refused() -> None:
    batch = build_batch([Record(0, BASE_TS, b"k", b"v")])
    control = bytearray(
        build_batch(
            [Record(1, BASE_TS, b"\x00\x00\x00\x00", b"")], base_offset=1, transactional=True
        )
    )
    control[22] |= 0x20  # the control bit (attributes low byte); the CRC no longer holds
    columns, next_offset = decode_columns(batch + bytes(control), 0, 10, check_crcs=False)
    assert columns is not None and list(columns.offsets) == [0] and next_offset == 2
    damaged = bytearray(batch)
    damaged[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        decode_columns(bytes(damaged), 0, 10)


def _record(fields: bytes) -> bytes:
    """A record body (attributes onwards) behind its length varint (zigzag, one byte)."""
    assert len(fields) < 64
    return bytes([len(fields) << 1]) + fields


# Attributes, timestamp delta 0, offset delta 0, null key (-1), value "v", no headers.
GOOD = b"\x00\x00\x00\x01\x02v\x00"


@pytest.mark.parametrize(
    ("body", "count", "problem"),
    [
        pytest.param(_record(GOOD), 1, None, id="good"),
        # The length says one byte more than the fields take (a stray byte at the end).
        pytest.param(_record(GOOD + b"\x00"), 1, "do not end where its length says", id="stray"),
        # One header ("k" = "v"), then a stray byte the length covers.
        pytest.param(
            _record(GOOD[:-1] + b"\x02\x02k\x02v\x00"),
            1,
            "do not end where its length says",
            id="stray-after-headers",
        ),
        # Two headers announced, none there: the walk runs out of the record.
        pytest.param(_record(GOOD[:-1] + b"\x04"), 1, "runs past the end", id="headers"),
        # The header count's varint goes on past the record (and past the fetched bytes:
        # the record is the last thing in them); a two-byte read must not take a byte
        # from beyond either end.
        pytest.param(_record(GOOD[:-1] + b"\x80"), 1, "runs past the end", id="split-end"),
        pytest.param(
            _record(GOOD[:-1] + b"\x80") + _record(GOOD),
            2,
            "runs past the end",
            id="split-varint",
        ),
        # A key of length 100 inside a 7-byte record.
        pytest.param(
            _record(b"\x00\x00\x00\xc8\x01" + GOOD[4:]), 1, "runs past the end", id="key-size"
        ),
        # A key of length -2: only -1 (null) is allowed below zero.
        pytest.param(_record(b"\x00\x00\x00\x03" + GOOD[4:]), 1, "negative size", id="key-2"),
        # A timestamp delta whose varint never ends.
        pytest.param(
            _record(b"\x00" + b"\xff" * 11 + b"\x01"), 1, "longer than 10 bytes", id="varint"
        ),
        pytest.param(b"\x00" + GOOD, 1, "negative size", id="zero-length"),
        # The batch says two records; its body holds one.
        pytest.param(_record(GOOD), 2, "runs past the end", id="missing-record"),
        # The batch says one record; its body holds two.
        pytest.param(_record(GOOD) * 2, 1, "do not fill it exactly", id="extra-record"),
    ],
)
def test_malformed_records_are_refused_by_name(
    body: bytes, count: int, problem: str | None
) -> None:
    """Each malformed record in a batch whose CRC holds is refused, as Kafka's
    DefaultRecord.readFrom refuses it: the CRC cannot catch a producer's own mistake."""
    batch = build_producer_batch(RecordSet.of(body, count), timestamp=BASE_TS)
    if problem is None:
        columns, _next = decode_columns(batch, 0, 10, with_headers=True)
        assert columns is not None and columns.values.to_pylist() == [b"v"]
        assert columns.keys.to_pylist() == [None]
        return
    with pytest.raises(CorruptRecordError, match=problem):
        decode_columns(batch, 0, 10, with_headers=True)


def test_header_keys_that_are_not_utf8_are_replaced_as_java_does() -> None:
    header = b"\x02\xff" + b"\x02x"  # key: the byte 0xff; value: "x"
    fields = GOOD[:-1] + b"\x02" + header
    batch = build_producer_batch(RecordSet.of(_record(fields), 1), timestamp=BASE_TS)
    columns, _next = decode_columns(batch, 0, 10, with_headers=True)
    assert columns is not None and columns.headers is not None
    assert columns.headers.to_pylist() == [[{"key": "\ufffd", "value": b"x"}]]
