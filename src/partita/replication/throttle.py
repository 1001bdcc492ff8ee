"""A byte-rate limit for reassignment traffic (KIP-73's replication quotas), sans-IO.

A token bucket refilled at the current rate (which may change at run time: the cluster-wide
dynamic config), holding at most one second's worth, so a throttled replica copies at
the set rate on average and never bursts far above it. A rate of 0 means unlimited.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class ByteRateLimit:
    def __init__(self, rate: Callable[[], int], clock: Callable[[], float] = time.monotonic):
        self.rate = rate
        self.clock = clock
        self._tokens = 0.0
        self._at = clock()

    def allowance(self) -> int | None:
        """Bytes that may go now; None when there is no limit."""
        rate = self.rate()
        if rate <= 0:
            return None
        now = self.clock()
        self._tokens = min(float(rate), self._tokens + (now - self._at) * rate)
        self._at = now
        return int(self._tokens)

    def spend(self, size: int) -> None:
        self._tokens -= size
