"""Column-wise decoding of fetched batches agrees with the record-by-record decoder."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partita.errors import CorruptRecordError
from partita.protocol.compression import Compression
from partita.protocol.record_columns import decode_columns
from partita.protocol.records import Record, build_batch

BASE_TS = 1_700_000_000_000

records_strategy = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=30)),
        st.one_of(st.none(), st.binary(max_size=9000)),  # crosses 1-, 2- and 3-byte lengths
        st.integers(-100_000, 100_000),
        st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=5)), max_size=2),
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
    expected: list[tuple[int, bytes | None, bytes | None, int, int, int]] = []
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
            expected.append((r.offset, r.key, r.value, ts, int(log_append), len(r.headers)))
        offset += len(records)
    start = data.draw(st.integers(0, offset))
    end = data.draw(st.integers(start, offset + 1))
    wanted = [e for e in expected if start <= e[0] < end]
    # A fetch may end in the middle of a batch: that part is left for the next fetch.
    cut = data.draw(st.integers(0, 60))
    columns, next_offset = decode_columns(fetched + fetched[:cut], start, end)
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
    assert list(columns.header_counts) == [e[5] for e in wanted]


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
