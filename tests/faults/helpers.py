"""Shared pieces of the fault-injection tests: verifiable payloads and log checks.

Every record's content is a pure function of its offset, so a reader that only has the
data directory can tell a correct record from a damaged, misplaced or invented one:

    key        b"<offset>:<value length>"
    value      shake_256(offset) stretched to the value length
    timestamp  T0 + 10 * offset + a small offset-derived jitter (not monotonic)

The helpers raise AssertionError with a precise message on the first inconsistency.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from partita.protocol.compression import Compression
from partita.protocol.record_batch import BatchHeader, check_crc, iter_headers, read_header
from partita.protocol.records import Record, build_batch, decode_records
from partita.storage.config import LogConfig
from partita.storage.log import PartitionLog
from partita.storage.log_manager import LogManager

REPO_ROOT = Path(__file__).resolve().parents[2]
T0 = 1_600_000_000_000
TOPIC = "faults"
ALL_CODECS = tuple(Compression)

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


# -- payloads ----------------------------------------------------------------------


def timestamp_for(offset: int) -> int:
    jitter = hashlib.sha256(b"ts" + offset.to_bytes(8, "big")).digest()[0] % 41 - 20
    return T0 + 10 * offset + jitter


def value_for(offset: int, length: int) -> bytes:
    return hashlib.shake_256(offset.to_bytes(8, "big")).digest(length)


def key_for(offset: int, length: int) -> bytes:
    return f"{offset}:{length}".encode()


def records_for(first_offset: int, count: int, value_length: int) -> list[Record]:
    return [
        Record(
            o,
            timestamp_for(o),
            key_for(o, value_length),
            value_for(o, value_length),
            [("sha", hashlib.sha256(o.to_bytes(8, "big")).digest())],
        )
        for o in range(first_offset, first_offset + count)
    ]


def make_batch(
    first_offset: int,
    rng: random.Random,
    *,
    min_bytes: int = 100,
    max_bytes: int = 64 * 1024,
    codecs: Sequence[Compression] = ALL_CODECS,
    max_records: int = 8,
    leader_epoch: int = -1,
) -> bytes:
    """A batch of verifiable records for ``first_offset`` onwards, roughly log-uniformly
    sized between ``min_bytes`` and ``max_bytes`` (values are incompressible)."""
    target = math.exp(rng.uniform(math.log(min_bytes), math.log(max_bytes)))
    count = rng.randint(1, max_records)
    value_length = max(0, int((target - 61) / count) - 60)
    return build_batch(
        records_for(first_offset, count, value_length),
        base_offset=first_offset,
        compression=rng.choice(list(codecs)),
        partition_leader_epoch=leader_epoch,
    )


def fill(
    partition_log: PartitionLog,
    batches: int,
    rng: random.Random,
    *,
    epoch: int = 0,
    **batch_options: int,
) -> list[int]:
    """Append ``batches`` verifiable batches; return the acknowledged last offsets."""
    acked = []
    for _ in range(batches):
        batch = make_batch(partition_log.log_end_offset, rng, **batch_options)
        acked.append(partition_log.append_as_leader(batch, epoch).last_offset)
    return acked


# -- opening and closing -----------------------------------------------------------


def open_manager(data_dir: Path, config: LogConfig | None = None) -> LogManager:
    cfg = config or LogConfig()
    manager = LogManager(data_dir, lambda _topic: cfg)
    manager.startup()
    return manager


def crash_close(manager: LogManager) -> None:
    """Drop a manager as a crash would: close descriptors, flush nothing, no marker."""
    for partition_log in manager.logs.values():
        for segment in partition_log.segments:
            segment.close_file()


# -- checks ------------------------------------------------------------------------


def check_record(record: Record) -> None:
    assert record.key is not None, f"offset {record.offset}: record lost its key"
    text = record.key.decode()
    key_offset, _, length = text.partition(":")
    assert int(key_offset) == record.offset, (
        f"record at offset {record.offset} carries the key of offset {key_offset}"
    )
    assert record.value == value_for(record.offset, int(length)), (
        f"offset {record.offset}: value differs from what was written"
    )
    assert record.timestamp == timestamp_for(record.offset), (
        f"offset {record.offset}: timestamp {record.timestamp} != {timestamp_for(record.offset)}"
    )


@dataclass
class Contents:
    batches: list[tuple[BatchHeader, list[Record]]]
    log_start_offset: int
    log_end_offset: int

    @property
    def records(self) -> list[Record]:
        return [r for _, records in self.batches for r in records]

    @property
    def epochs(self) -> list[tuple[int, int]]:
        """(epoch, first offset) as a leader-epoch cache should hold them."""
        out: list[tuple[int, int]] = []
        for header, _ in self.batches:
            epoch = header.partition_leader_epoch
            if epoch >= 0 and (not out or epoch > out[-1][0]):
                out.append((epoch, header.base_offset))
        return out


def check_contents(partition_log: PartitionLog, acked: Iterable[int] = ()) -> Contents:
    """Read every batch up to the LEO: CRCs, contiguous offsets, content, acked offsets."""
    start, leo = partition_log.log_start_offset, partition_log.log_end_offset
    batches: list[tuple[BatchHeader, list[Record]]] = []
    expected = start
    for raw in partition_log.iter_batches(max_offset=leo):
        header = read_header(raw)
        assert header.size == len(raw), f"batch at {header.base_offset} has a wrong length"
        check_crc(raw, 0, header)
        _, records = decode_records(raw)
        assert header.base_offset == expected, (
            f"{partition_log.name}: batch starts at {header.base_offset}, expected {expected}"
        )
        offsets = [r.offset for r in records]
        assert offsets == list(range(header.base_offset, header.next_offset)), (
            f"{partition_log.name}: batch at {header.base_offset} holds offsets {offsets}"
        )
        for record in records:
            check_record(record)
        batches.append((header, records))
        expected = header.next_offset
    assert expected == leo, f"{partition_log.name}: batches end at {expected}, LEO is {leo}"
    lost = sorted(o for o in set(acked) if not start <= o < leo)
    assert not lost, f"{partition_log.name}: acknowledged offsets missing: {lost[:10]}"
    return Contents(batches, start, leo)


def check_segment_indexes(
    name: str,
    log_bytes: bytes,
    offset_entries: Sequence[tuple[int, int]],
    time_entries: Sequence[tuple[int, int]],
) -> None:
    """Every offset-index entry (offset, position) must name the start of the batch whose
    last offset it is; time-index entries (ts, offset) must rise and record the largest
    timestamp up to the batch whose last offset they name."""
    headers = dict(iter_headers(log_bytes))
    covered = sum(h.size for h in headers.values())
    assert covered == len(log_bytes), (
        f"{name}: {len(log_bytes) - covered} bytes after the last whole batch"
    )
    previous = (-1, -1)
    for offset, position in offset_entries:
        assert offset > previous[0] and position > previous[1], (
            f"{name}: offset index entry {(offset, position)} is out of order"
        )
        header = headers.get(position)
        assert header is not None, f"{name}: index entry {(offset, position)} not at a batch"
        assert header.last_offset == offset, (
            f"{name}: index entry {(offset, position)} points at the batch ending at "
            f"{header.last_offset}"
        )
        previous = (offset, position)
    by_last = {h.last_offset: h for h in headers.values()}
    ordered = sorted(headers.values(), key=lambda h: h.base_offset)
    previous = (-(2**63), -1)
    for ts, offset in time_entries:
        assert ts > previous[0] and offset >= previous[1], (
            f"{name}: time index entry {(ts, offset)} is out of order after {previous}"
        )
        assert offset in by_last, f"{name}: time index entry {(ts, offset)} not at a batch end"
        largest = max(h.max_timestamp for h in ordered if h.last_offset <= offset)
        assert ts == largest, (
            f"{name}: time index entry {(ts, offset)}, but the largest timestamp up to that "
            f"offset is {largest}"
        )
        previous = (ts, offset)


def check_loaded_indexes(partition_log: PartitionLog) -> None:
    """Check the indexes every segment of an open log is using (loading them if lazy)."""
    next_base = None
    for segment in partition_log.segments:
        data = segment.log_path.read_bytes()
        assert len(data) == segment.size, (
            f"{segment.log_path.name}: file has {len(data)} bytes, segment says {segment.size}"
        )
        if next_base is not None:
            assert segment.base_offset == next_base
        check_segment_indexes(
            str(segment.log_path),
            data,
            segment.offset_index.entries(),
            segment.time_index.entries(),
        )
        headers = [h for _, h in iter_headers(data)]
        next_base = headers[-1].next_offset if headers else segment.base_offset


def read_index_files(log_path: Path) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Entries of a segment's index files; a missing file counts as an empty index (the
    segment writes index files lazily, so a segment without entries may have none)."""
    base = int(log_path.stem)
    index_path, time_path = log_path.with_suffix(".index"), log_path.with_suffix(".timeindex")
    index = index_path.read_bytes() if index_path.exists() else b""
    times = time_path.read_bytes() if time_path.exists() else b""
    assert len(index) % 8 == 0, f"{log_path.name}: .index has {len(index)} bytes"
    assert len(times) % 12 == 0, f"{log_path.name}: .timeindex has {len(times)} bytes"
    offsets = [(base + rel, pos) for rel, pos in _OFFSET_ENTRY.iter_unpack(index)]
    stamps = [(ts, base + rel) for ts, rel in _TIME_ENTRY.iter_unpack(times)]
    return offsets, stamps


def check_index_files(partition_dir: Path) -> int:
    """Check the index files on disk (after a shutdown); return the segments checked."""
    logs = sorted(partition_dir.glob("*.log"))
    for log_path in logs:
        offsets, stamps = read_index_files(log_path)
        check_segment_indexes(str(log_path), log_path.read_bytes(), offsets, stamps)
    return len(logs)


def expected_offset_for_timestamp(records: Sequence[Record], target: int) -> int | None:
    for record in records:
        if record.timestamp >= target:
            return record.offset
    return None


def check_timestamp_lookups(partition_log: PartitionLog, contents: Contents, samples: int) -> None:
    """offset_for_timestamp and max_timestamp_offset against a brute-force answer: before
    the log, after it, at each segment's first record and at sampled records."""
    records = contents.records
    leo = contents.log_end_offset
    rng = random.Random(len(records))
    targets = [T0 - 1_000, timestamp_for(leo + 100)]
    targets += [timestamp_for(s.base_offset) for s in partition_log.segments if s.base_offset < leo]
    picked = rng.sample(records, min(samples, len(records)))
    targets += [r.timestamp for r in picked] + [r.timestamp - 5 for r in picked]
    for target in targets:
        want = expected_offset_for_timestamp(records, target)
        found = partition_log.offset_for_timestamp(target, max_offset=contents.log_end_offset)
        got = None if found is None else found[0]
        assert got == want, f"offset_for_timestamp({target}) gave {found}, expected {want}"
        if found is not None:
            assert found[1] == timestamp_for(found[0])
    if records:
        best = max(records, key=lambda r: (r.timestamp, -r.offset))
        assert partition_log.max_timestamp_offset() == (best.offset, best.timestamp)


def check_offset_reads(partition_log: PartitionLog, contents: Contents) -> None:
    """A read at the first, middle and last offset of every batch starts at that batch."""
    for header, _records in contents.batches:
        for offset in {
            header.base_offset,
            header.last_offset,
            (header.base_offset + header.last_offset) // 2,
        }:
            region = partition_log.read(offset, 1, max_offset=contents.log_end_offset)
            assert region is not None, f"read({offset}) found nothing"
            first = read_header(region.read())
            assert first.base_offset == header.base_offset, (
                f"read({offset}) starts at batch {first.base_offset}, expected {header.base_offset}"
            )


def file_tree(directory: Path) -> dict[str, int]:
    return {
        str(p.relative_to(directory)): p.stat().st_size
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def flip_byte(path: Path, position: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        byte = os.pread(fd, 1, position)
        os.pwrite(fd, bytes([byte[0] ^ 0xFF]), position)
    finally:
        os.close(fd)
