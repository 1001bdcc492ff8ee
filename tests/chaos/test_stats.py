"""The chaos figures on hand-made histories: a silence belongs to the fault it followed."""

from __future__ import annotations

from tests.chaos import stats
from tests.chaos.history import OK, Fault, Outcome, Send


def _acks(times: list[float], partition: int = 0) -> list[Outcome]:
    return [Outcome(t, f"p1-{i}", partition, OK, i) for i, t in enumerate(times)]


def test_a_silence_belongs_to_the_last_fault_that_started_before_it_ended() -> None:
    acks = stats.ack_times(_acks([0.0, 1.0, 2.0, 5.5, 6.0, 6.5, 7.0, 9.8, 10.0, 14.0, 14.1]))
    # Fault A at 1.5 (silence 2.0 -> 5.5), fault B at 9.9 (silence 10.0 -> 14.0).
    assert stats.unavailability(acks, 1.5, 9.9) == 3.5
    assert stats.unavailability(acks, 9.9, 20.0) == 4.0
    assert stats.unavailability(acks, 0.0, 1.5, inside=True) == 1.0


def test_figures_and_windows() -> None:
    # A value every 0.1 s; those sent from 3.0 to 4.9 s all acknowledged at 5.0 s.
    sends = [Send(i / 10, f"p1-{i}", 0) for i in range(100)]
    acks = [
        Outcome(5.0 if 30 <= i < 50 else i / 10 + 0.01, f"p1-{i}", 0, OK, i) for i in range(100)
    ]
    events = [*sends, *acks, Fault(3.0, "kill", "start", "broker 1"),
              Fault(4.0, "kill", "heal", "broker 1")]  # fmt: skip
    windows = stats.fault_windows(events, 10.0)
    assert windows == [stats.Window("kill", "broker 1", 3.0, 4.0, 10.0)]
    row = stats.figures(events, "kill", 0.0, 10.0, windows)
    assert row.faults == 1 and round(row.unavailable_max_s, 2) == 2.09
    assert round(row.p99_ms) == 2000  # the value sent at 3.0 s waited until 5.0
