"""Bulk record encoding: what it writes must decode, with both decoders, to the rows given."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from aiokafka.record.default_records import DefaultRecordBatch
from hypothesis import given, settings
from hypothesis import strategies as st

from partita.protocol.bulk_records import encode_record_sets, varint
from partita.protocol.compression import Compression
from partita.protocol.record_sets import build_producer_batch
from partita.protocol.records import decode_records, write_varint

SHARED = [("spark.batch.id", b"7"), ("spark.task.id", b"3"), ("empty", None)]


def test_varint_table_matches_the_reference_encoder() -> None:
    for n in [0, 1, 63, 64, 8191, 8192, 16383, 16384, 1 << 20, -1, -300]:
        reference = bytearray()
        write_varint(reference, n)
        assert varint(n) == bytes(reference)


@settings(max_examples=120, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=40)),
            st.one_of(st.none(), st.binary(max_size=20_000)),
        ),
        min_size=1,
        max_size=60,
    ),
    st.sampled_from([256, 4096, 1 << 20]),
    st.sampled_from(list(Compression)),
    st.booleans(),
    # Row numbers cross every digit count, including the powers of ten.
    st.one_of(
        st.sampled_from([0, 1, 8, 9, 10, 95, 99, 100, 990, 9_999_990, 10**18 - 30]),
        st.integers(0, 2**62),
    ),
)
def test_record_sets_decode_to_the_rows_given(
    rows: list[tuple[bytes | None, bytes | None]],
    max_bytes: int,
    codec: Compression,
    with_headers: bool,
    row_base: int,
) -> None:
    keys = [k for k, _v in rows]
    values = [v for _k, v in rows]
    chosen = list(range(0, len(rows), 2)) + list(range(1, len(rows), 2))  # any row order
    sets = encode_record_sets(
        pa.array(values, pa.binary()),
        pa.array(keys, pa.binary()),
        np.array(chosen, dtype=np.int64),
        shared_headers=SHARED if with_headers else (),
        row_header="row" if with_headers else None,
        row_base=row_base,
        max_bytes=max_bytes,
    )
    seen: list[int] = []
    for records in sets:
        batch = build_producer_batch(
            records,
            timestamp=1_700_000_000_000,
            compression=codec,
            producer_id=5,
            producer_epoch=1,
            base_sequence=9,
        )
        header, decoded = decode_records(batch)
        assert header.records_count == records.count and header.producer_id == 5
        assert header.base_sequence == 9
        if records.count > 1:  # one record may exceed the limit on its own
            assert len(records.body) <= max_bytes
        theirs = list(DefaultRecordBatch(bytearray(batch)))
        assert DefaultRecordBatch(bytearray(batch)).validate_crc()
        for offset, (mine, other) in enumerate(zip(decoded, theirs, strict=True)):
            row = chosen[len(seen)]
            seen.append(row)
            assert mine.offset == other.offset == offset
            assert mine.key == other.key == keys[row]
            assert mine.value == other.value == values[row]
            assert mine.timestamp == 1_700_000_000_000
            expected = [*SHARED, ("row", str(row_base + row).encode())] if with_headers else []
            assert mine.headers == expected
            assert list(other.headers) == expected
    assert seen == chosen
