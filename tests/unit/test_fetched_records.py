"""The consumer's records (aiokafka's compiled batch reader) are the records the Spark
connector's column decoder (numba) finds in the same bytes, and malformed batches are
refused by both."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partita.client.fetched_records import ConsumerRecord, read_batches
from partita.errors import CorruptRecordError
from partita.protocol.compression import Compression
from partita.protocol.record_batch import CRC_POS, compute_crc
from partita.protocol.record_columns import decode_columns
from partita.protocol.record_sets import RecordSet, build_producer_batch
from partita.protocol.records import Record, build_batch
from tests.unit.test_record_columns import BASE_TS, GOOD, _record, records_strategy

TP = ("orders", 3)


def fetched_bytes(
    batches: list[
        tuple[
            list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes]]]], Compression, bool
        ]
    ],
) -> tuple[bytes, list[ConsumerRecord]]:
    """Batches one after another, and the records a consumer must get from them."""
    data = b""
    expected = []
    offset = 0
    for rows, codec, log_append in batches:
        records = [
            Record(offset + i, BASE_TS + delta, key, value, headers)
            for i, (key, value, delta, headers) in enumerate(rows)
        ]
        data += build_batch(
            records, base_offset=offset, compression=codec, log_append_time=log_append
        )
        newest = max(r.timestamp for r in records)
        expected += [
            ConsumerRecord(
                *TP,
                r.offset,
                newest if log_append else r.timestamp,
                int(log_append),
                r.key,
                r.value,
                r.headers,
            )
            for r in records
        ]
        offset += len(records)
    return data, expected


def same(got: list[ConsumerRecord], expected: list[ConsumerRecord]) -> None:
    assert [r._replace(headers=list(r.headers)) for r in got] == expected


def from_columns(data: bytes, start: int, check_crcs: bool) -> list[ConsumerRecord]:
    """What the column decoder finds, as consumer records."""
    columns, _next = decode_columns(data, start, 2**63, check_crcs, with_headers=True)
    if columns is None:
        return []
    assert columns.headers is not None
    headers = [[(h["key"], h["value"]) for h in entry] for entry in columns.headers.to_pylist()]
    return [
        ConsumerRecord(*TP, *fields)
        for fields in zip(
            columns.offsets.tolist(),
            columns.timestamps_ms.tolist(),
            columns.timestamp_types.tolist(),
            columns.keys.to_pylist(),
            columns.values.to_pylist(),
            headers,
            strict=True,
        )
    ]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(records_strategy, st.sampled_from(list(Compression)), st.booleans()),
        min_size=1,
        max_size=4,
    ),
    st.data(),
)
def test_the_records_from_the_position_on_as_the_column_decoder_finds_them(
    batches: list[
        tuple[
            list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes]]]], Compression, bool
        ]
    ],
    data: st.DataObject,
) -> None:
    fetched, expected = fetched_bytes(batches)
    start = data.draw(st.integers(0, len(expected)))
    cut = data.draw(st.integers(0, 60))  # a partial batch at the end is left for later
    wanted = [r for r in expected if r.offset >= start]
    for crc in (True, False):
        same(read_batches(TP, fetched + fetched[:cut], start, crc), wanted)
        same(from_columns(fetched + fetched[:cut], start, crc), wanted)


def test_control_batches_yield_nothing_and_damage_is_refused() -> None:
    batch = build_batch([Record(0, BASE_TS, b"k", b"v")])
    control = bytearray(
        build_batch(
            [Record(1, BASE_TS, b"\x00\x00\x00\x00", b"")], base_offset=1, transactional=True
        )
    )
    control[22] |= 0x20  # the control bit
    control[CRC_POS : CRC_POS + 4] = compute_crc(control, 0, len(control)).to_bytes(4, "big")
    got = read_batches(TP, batch + bytes(control), 0, True)
    assert [(r.offset, r.value) for r in got] == [(0, b"v")]
    damaged = bytearray(batch)
    damaged[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        read_batches(TP, bytes(damaged), 0, True)


@pytest.mark.parametrize(
    ("body", "count"),
    [
        pytest.param(_record(GOOD + b"\x00"), 1, id="stray"),
        pytest.param(_record(GOOD[:-1] + b"\x04"), 1, id="headers"),
        pytest.param(_record(GOOD[:-1] + b"\x80") + _record(GOOD), 2, id="split-varint"),
        pytest.param(_record(b"\x00\x00\x00\xc8\x01" + GOOD[4:]), 1, id="key-size"),
        pytest.param(_record(b"\x00" + b"\xff" * 11 + b"\x01"), 1, id="varint"),
        pytest.param(b"\x00" + GOOD, 1, id="zero-length"),
        pytest.param(_record(GOOD), 2, id="missing-record"),
        pytest.param(_record(GOOD) * 2, 1, id="extra-record"),
    ],
)
def test_the_reader_refuses_malformed_records(body: bytes, count: int) -> None:
    batch = build_producer_batch(RecordSet.of(body, count), timestamp=BASE_TS)
    with pytest.raises(CorruptRecordError, match="orders-3, batch at offset 0"):
        read_batches(TP, batch, 0, True)


def test_header_names_that_are_not_utf8_are_replaced_as_java_does() -> None:
    header = b"\x02\xff" + b"\x02x"  # name: the byte 0xff; value: "x"
    fields = GOOD[:-1] + b"\x02" + header
    batch = build_producer_batch(RecordSet.of(_record(fields), 1), timestamp=BASE_TS)
    (record,) = read_batches(TP, batch, 0, True)
    assert list(record.headers) == [("\ufffd", b"x")]
    assert [record] == from_columns(batch, 0, True)


def test_a_consumer_loads_no_numba_arrow_numpy_or_kafka_python() -> None:
    """What makes a consumer's (and `partita consume`'s) start-up: none of these heavy
    packages is imported by the consumer or the consume command until a group is used."""
    probe = (
        "import sys, partita.client.consumer, partita.cli.consume_cmd\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    loaded = set(
        subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True
        ).stdout.split()
    )
    assert not loaded & {"numba", "llvmlite", "pyarrow", "numpy", "kafka", "structlog"}, loaded
