"""The reassignment byte-rate limit: refills at the rate, holds a second's worth."""

from __future__ import annotations

from partita.replication.throttle import ByteRateLimit


def test_the_bucket_refills_at_the_rate_and_caps_at_one_second() -> None:
    now = [0.0]
    rate = [1000]
    limit = ByteRateLimit(lambda: rate[0], clock=lambda: now[0])
    assert limit.allowance() == 0
    now[0] = 0.5
    assert limit.allowance() == 500
    limit.spend(800)  # one batch may overshoot; the debt is paid before more goes
    now[0] = 0.6
    assert limit.allowance() == -200
    now[0] = 10.0
    assert limit.allowance() == 1000  # never more than a second's worth
    rate[0] = 0
    assert limit.allowance() is None  # no limit
