"""Property-based test: random appends, rolls, retention, truncation and crashes keep
the partition log's invariants, checked against a plain in-memory model."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from partita.protocol.compression import Compression
from partita.protocol.record_batch import check_crc, read_header
from partita.protocol.records import Record, build_batch, decode_records
from partita.storage.config import LogConfig
from partita.storage.log import PartitionLog
from partita.storage.log_manager import LogManager
from tests.conftest import FakeClock

CONFIG = LogConfig(
    segment_bytes=3000,
    index_interval_bytes=200,
    retention_bytes=8000,
    retention_ms=-1,
    file_delete_delay_ms=0,
)


class PartitionLogMachine(RuleBasedStateMachine):
    """Model: offset -> (batch base offset, value) for every record still in the log."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="partita-prop-"))
        self.clock = FakeClock()
        self.model: dict[int, tuple[int, bytes]] = {}
        self.batch_bases: list[int] = []
        self.next_offset = 0
        self.manager: LogManager | None = None

    @initialize()
    def start(self) -> None:
        self._open()

    def _open(self) -> None:
        self.manager = LogManager(self.tmp, lambda _t: CONFIG, clock=self.clock)
        self.manager.startup()
        assert not self.manager.offline

    @property
    def log(self) -> PartitionLog:
        assert self.manager is not None
        return self.manager.get_or_create("p", 0)

    @rule(
        n=st.integers(1, 6),
        size=st.integers(0, 300),
        codec=st.sampled_from(list(Compression)),
        ts_step=st.integers(0, 50),
    )
    def append(self, n: int, size: int, codec: Compression, ts_step: int) -> None:
        base = self.next_offset
        values = [f"{base + i}|".encode().ljust(size, b"z") for i in range(n)]
        self.clock.advance(ts_step)
        batch = build_batch(
            [Record(i, self.clock.now + i, b"key", v) for i, v in enumerate(values)],
            compression=codec,
        )
        info = self.log.append_as_leader(batch, leader_epoch=len(self.batch_bases) // 5)
        assert info.first_offset == base
        for i, v in enumerate(values):
            self.model[base + i] = (base, v)
        self.batch_bases.append(base)
        self.next_offset = base + n

    @rule()
    def advance_high_watermark(self) -> None:
        self.log.update_high_watermark(self.log.log_end_offset)

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        log = self.log
        target = data.draw(st.integers(log.log_start_offset, log.high_watermark))
        log.delete_records(target)
        self._forget_below(log.log_start_offset)

    @rule()
    def retention(self) -> None:
        self.log.enforce_retention()
        assert self.log.size_bytes <= CONFIG.retention_bytes + CONFIG.segment_bytes
        self._forget_below(self.log.log_start_offset)

    @precondition(lambda self: bool(self.batch_bases))
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        log = self.log
        target = data.draw(st.integers(log.log_start_offset, log.log_end_offset))
        log_start = log.log_start_offset
        log.truncate_to(target)
        # Truncation removes whole batches: the one holding ``target`` goes too.
        cut = min(
            (b for b in self.batch_bases if self._batch_end(b) > target),
            default=self.next_offset,
        )
        if cut < log_start:
            # That batch straddles the log start: the log restarts empty at the target.
            self.model, self.batch_bases, cut = {}, [], target
        self.model = {o: v for o, v in self.model.items() if o < cut}
        self.batch_bases = [b for b in self.batch_bases if b < cut]
        self.next_offset = cut
        assert log.log_end_offset == cut

    def _batch_end(self, base: int) -> int:
        later = [b for b in self.batch_bases if b > base]
        return later[0] if later else self.next_offset

    @rule(torn=st.binary(max_size=80))
    def crash(self, torn: bytes) -> None:
        """Stop without a clean shutdown, optionally leaving a torn write at the end."""
        assert self.manager is not None
        self.manager.checkpoint()
        active = self.log.active_segment.log_path
        for partition_log in self.manager:
            partition_log.close()
        with open(active, "ab") as f:
            f.write(torn)
        self._open()

    @rule()
    def clean_restart(self) -> None:
        assert self.manager is not None
        self.manager.shutdown()
        self._open()

    def _forget_below(self, offset: int) -> None:
        self.model = {o: v for o, v in self.model.items() if o >= offset}

    @invariant()
    def offsets_contiguous_and_content_intact(self) -> None:
        if self.manager is None:
            return
        log = self.log
        assert log.log_end_offset == self.next_offset
        assert log.log_start_offset <= log.high_watermark <= log.log_end_offset
        seen: list[int] = []
        for batch in log.iter_batches(log.log_start_offset, log.log_end_offset):
            header = read_header(batch)
            check_crc(batch, 0, header)
            for record in decode_records(batch)[1]:
                if record.offset >= log.log_start_offset:
                    assert record.value == self.model[record.offset][1]
                    seen.append(record.offset)
        assert seen == list(range(log.log_start_offset, log.log_end_offset))
        assert seen == sorted(self.model)

    @invariant()
    def indexes_consistent(self) -> None:
        if self.manager is None:
            return
        for segment in self.log.segments:
            headers = dict(segment.iter_headers(0))
            for offset, position in segment.offset_index.entries():
                assert headers[position].last_offset == offset
            times = segment.time_index.entries()
            assert times == sorted(times)

    def teardown(self) -> None:
        if self.manager is not None:
            for partition_log in self.manager:
                partition_log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


PartitionLogMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestPartitionLog = PartitionLogMachine.TestCase
