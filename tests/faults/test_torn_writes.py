"""Torn and damaged writes at the end of the active segment.

After a clean write of N batches, bytes are appended to the active ``.log`` file the way
a crash or a bad disk would leave them. Reopening must end the log at the last valid
batch, keep everything before it, keep the cut bytes in a ``.corrupt`` file beside the
segment, and carry on appending at the right offset.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from partita.protocol.record_batch import HEADER_SIZE, MAX_TIMESTAMP_POS, iter_headers
from partita.protocol.records import build_batch
from partita.storage.config import LogConfig
from partita.storage.log_manager import CLEAN_SHUTDOWN_MARKER
from tests.faults.helpers import (
    TOPIC,
    check_contents,
    check_index_files,
    check_loaded_indexes,
    crash_close,
    fill,
    make_batch,
    open_manager,
    records_for,
)

CONFIG = LogConfig(segment_bytes=32 * 1024)
EPOCH = 3

pytestmark = pytest.mark.usefixtures("no_fsync")


def next_batch(leo: int, rng: random.Random) -> bytes:
    """A batch exactly as the log would have written it next (offset and epoch set)."""
    return make_batch(leo, rng, min_bytes=2000, max_bytes=8000, leader_epoch=EPOCH)


def flipped(data: bytes, position: int) -> bytes:
    damaged = bytearray(data)
    damaged[position] ^= 0x5A
    return bytes(damaged)


# Each tail maker gets (active segment bytes, LEO, rng) and returns (valid, damaged):
# ``valid`` are whole good batches the crash left before the damaged bytes.
TailMaker = Callable[[bytes, int, random.Random], tuple[bytes, bytes]]

TAILS: dict[str, TailMaker] = {
    "half_a_batch_of_garbage": lambda _seg, _leo, rng: (b"", rng.randbytes(2500)),
    "zero_filled_block": lambda _seg, _leo, _rng: (b"", bytes(4096)),
    "a_few_bytes": lambda _seg, _leo, _rng: (b"", b"\x00\x00\x00"),
    "torn_header": lambda _seg, leo, rng: (b"", next_batch(leo, rng)[: HEADER_SIZE - 20]),
    "header_without_records": lambda _seg, leo, rng: (b"", next_batch(leo, rng)[:HEADER_SIZE]),
    "torn_next_batch": lambda _seg, leo, rng: (b"", (b := next_batch(leo, rng))[: len(b) // 2]),
    "truncated_copy_of_last_batch": lambda seg, _leo, _rng: (b"", last_batch(seg)[:-100]),
    "whole_copy_of_last_batch": lambda seg, _leo, _rng: (b"", last_batch(seg)),
    "payload_byte_flipped": lambda _seg, leo, rng: (
        b"",
        flipped(b := next_batch(leo, rng), rng.randrange(HEADER_SIZE, len(b))),
    ),
    "max_timestamp_byte_flipped": lambda _seg, leo, rng: (
        b"",
        flipped(next_batch(leo, rng), MAX_TIMESTAMP_POS + 7),
    ),
    "valid_batch_then_torn_batch": lambda _seg, leo, rng: valid_then_torn(leo, rng),
}

# Damage that only a full recovery sees: bad CRCs and a well-formed batch with stale
# offsets. After a clean shutdown the tail is trusted without CRC checks, as in Kafka, so
# these are only tried with the marker removed; the rest must be caught either way.
NEEDS_RECOVERY = {"payload_byte_flipped", "max_timestamp_byte_flipped", "whole_copy_of_last_batch"}
STRUCTURAL = set(TAILS) - NEEDS_RECOVERY


def last_batch(segment_bytes: bytes) -> bytes:
    pos, header = list(iter_headers(segment_bytes))[-1]
    return segment_bytes[pos : pos + header.size]


def valid_then_torn(leo: int, rng: random.Random) -> tuple[bytes, bytes]:
    good = build_batch(records_for(leo, 3, 500), base_offset=leo, partition_leader_epoch=EPOCH)
    torn = next_batch(leo + 3, rng)
    return good, torn[: len(torn) - 1]


def write_clean_log(data_dir: Path, seed: int) -> list[int]:
    manager = open_manager(data_dir, CONFIG)
    partition_log = manager.get_or_create(TOPIC, 0)
    acked = fill(partition_log, 60, random.Random(seed), epoch=EPOCH, max_bytes=6000)
    assert len(partition_log.segments) >= 2, "the test wants closed segments too"
    manager.shutdown()
    return acked


@pytest.mark.parametrize(
    ("tail", "marker"),
    [(t, "removed") for t in TAILS] + [(t, "kept") for t in sorted(STRUCTURAL)],
)
def test_damaged_tail_is_cut_and_quarantined(tmp_path: Path, tail: str, marker: str) -> None:
    data_dir = tmp_path / "data"
    acked = write_clean_log(data_dir, seed=len(tail))
    partition_dir = data_dir / f"{TOPIC}-0"
    active = sorted(partition_dir.glob("*.log"))[-1]
    clean_bytes = active.read_bytes()
    clean_leo = acked[-1] + 1
    valid, damaged = TAILS[tail](clean_bytes, clean_leo, random.Random(tail))
    assert damaged
    with open(active, "ab") as f:
        f.write(valid + damaged)
    if marker == "removed":
        (data_dir / CLEAN_SHUTDOWN_MARKER).unlink()
    valid_records = sum(h.last_offset_delta + 1 for _, h in iter_headers(valid))

    manager = open_manager(data_dir, CONFIG)
    assert manager.offline == {}
    partition_log = manager.get(TOPIC, 0)
    expected_leo = clean_leo + valid_records
    assert partition_log.log_end_offset == expected_leo
    check_contents(partition_log, acked)
    check_loaded_indexes(partition_log)

    cut_at = len(clean_bytes) + len(valid)
    assert active.stat().st_size == cut_at
    assert active.read_bytes() == clean_bytes + valid
    quarantined = sorted(partition_dir.glob("*.corrupt"))
    assert [p.name for p in quarantined] == [f"{active.name}.{cut_at}.corrupt"]
    assert quarantined[0].read_bytes() == damaged

    # Appending carries on right after the last valid batch, and survives a clean restart.
    more = fill(partition_log, 5, random.Random(1), epoch=EPOCH + 1, max_bytes=6000)
    assert more[0] >= expected_leo
    assert partition_log.log_end_offset == more[-1] + 1
    manager.shutdown()
    check_index_files(partition_dir)
    manager = open_manager(data_dir, CONFIG)
    assert manager.loaded_cleanly
    partition_log = manager.get(TOPIC, 0)
    contents = check_contents(partition_log, acked + more)
    assert contents.epochs == [(EPOCH, 0), (EPOCH + 1, expected_leo)]
    assert partition_log.epochs.entries == contents.epochs
    manager.shutdown()


def test_second_torn_tail_at_the_same_position_keeps_the_first(tmp_path: Path) -> None:
    """Two crashes in a row that tear a write at the same place (the restarted broker
    takes the retried batch and dies again before anything else is appended) must leave
    both cut tails on disk: ``.corrupt`` files exist so that nothing vanishes unseen."""
    data_dir = tmp_path / "data"
    acked = write_clean_log(data_dir, seed=5)
    partition_dir = data_dir / f"{TOPIC}-0"
    active = sorted(partition_dir.glob("*.log"))[-1]
    leo = acked[-1] + 1
    first_tail = next_batch(leo, random.Random(1))[:-10]
    second_tail = next_batch(leo, random.Random(2))[:-20]
    assert first_tail != second_tail

    for tail in (first_tail, second_tail):
        with open(active, "ab") as f:
            f.write(tail)
        (data_dir / CLEAN_SHUTDOWN_MARKER).unlink(missing_ok=True)
        manager = open_manager(data_dir, CONFIG)
        check_contents(manager.get(TOPIC, 0), acked)
        crash_close(manager)

    kept = [p.read_bytes() for p in partition_dir.glob("*.corrupt")]
    assert first_tail in kept, "the first cut tail was overwritten by the second"
    assert second_tail in kept
