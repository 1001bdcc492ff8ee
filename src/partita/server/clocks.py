"""The broker's three clocks, each for its own kind of time.

A host's wall clock can be stepped (an NTP correction, an operator's ``date -s``), by
hours. What is written down must carry wall time; what measures how long since
something happened must not jump with it, or a clock stepped forward shrinks every ISR
and expires every group member at once, and one stepped back keeps a dead follower in
the ISR, or a dead member in its group, for as long as it jumped.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    """Wall-clock time: for timestamps written down (records, markers, commits)."""
    return time.time_ns() // 1_000_000


def elapsed_ms() -> int:
    """Monotonic time, from an arbitrary origin: for how long since a follower fetched
    or caught up."""
    return time.monotonic_ns() // 1_000_000


_WALL_AT_START_MS = now_ms()
_MONOTONIC_AT_START_MS = elapsed_ms()


def steady_ms() -> int:
    """Wall time as it was when the process started, moved on by the monotonic clock:
    it reads like wall time (a group's state timestamp is reported and compared with
    commit timestamps) but never jumps. For the group coordinator's deadlines."""
    return _WALL_AT_START_MS + elapsed_ms() - _MONOTONIC_AT_START_MS
