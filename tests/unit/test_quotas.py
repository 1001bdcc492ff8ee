"""Client quotas without sockets (server/quotas.py): Kafka's precedence of user and
client-id entities, its sampled rate, and the throttle time that brings a client back to
its quota."""

from __future__ import annotations

from partita.server.quotas import FETCH, PRODUCE, REQUEST, QuotaManager


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def manager(*entries: tuple[tuple[tuple[str, str | None], ...], dict[str, float]]) -> QuotaManager:
    quotas = QuotaManager(clock=Clock())
    quotas.load(entries)
    return quotas


def test_no_quota_records_nothing() -> None:
    quotas = manager()
    assert not quotas.enabled
    assert quotas.record(PRODUCE, "alice", "app", 10**9) == 0


def test_precedence_is_kafkas() -> None:
    user_client = ((("user", "alice"), ("client-id", "app")), {PRODUCE: 1.0})
    user_default_client = ((("user", "alice"), ("client-id", None)), {PRODUCE: 2.0})
    user = ((("user", "alice"),), {PRODUCE: 3.0})
    default_user_client = ((("user", None), ("client-id", "app")), {PRODUCE: 4.0})
    default_user_default_client = ((("user", None), ("client-id", None)), {PRODUCE: 5.0})
    default_user = ((("user", None),), {PRODUCE: 6.0})
    client = ((("client-id", "app"),), {PRODUCE: 7.0})
    default_client = ((("client-id", None),), {PRODUCE: 8.0})
    ordered = [
        user_client,
        user_default_client,
        user,
        default_user_client,
        default_user_default_client,
        default_user,
        client,
        default_client,
    ]
    for first in range(len(ordered)):
        quota = manager(*ordered[first:]).quota(PRODUCE, "alice", "app")
        assert quota is not None and quota.bound == first + 1.0
    # Another user and client fall to the defaults.
    quota = manager(*ordered).quota(PRODUCE, "bob", "other")
    assert quota is not None and quota.bound == 5.0


def test_quota_keys_are_looked_up_separately() -> None:
    quotas = manager(
        ((("user", "alice"),), {PRODUCE: 100.0}),
        ((("client-id", None),), {FETCH: 50.0}),
    )
    produce, fetch = quotas.quota(PRODUCE, "alice", "x"), quotas.quota(FETCH, "alice", "x")
    assert produce is not None and produce.bound == 100.0
    assert fetch is not None and fetch.bound == 50.0
    assert quotas.quota(REQUEST, "alice", "x") is None


def test_a_default_gives_each_user_a_rate_of_its_own() -> None:
    quotas = manager(((("user", None),), {PRODUCE: 1000.0}))
    alice, bob = quotas.quota(PRODUCE, "alice", "c"), quotas.quota(PRODUCE, "bob", "c")
    assert alice is not None and bob is not None and alice.sensor != bob.sensor
    shared = manager(((("user", "alice"),), {PRODUCE: 1000.0}))
    one, two = shared.quota(PRODUCE, "alice", "c1"), shared.quota(PRODUCE, "alice", "c2")
    assert one is not None and two is not None and one.sensor == two.sensor


def test_throttle_brings_the_rate_back_to_the_quota() -> None:
    clock = Clock()
    quotas = QuotaManager(window_s=1.0, samples=11, clock=clock)
    quotas.load([((("user", "alice"),), {PRODUCE: 1000.0})])
    # Within the quota over the whole (ten-window) span: not throttled.
    assert quotas.record(PRODUCE, "alice", "c", 9_000) == 0
    # 20,000 bytes over a 10 s span is twice the rate: wait until the rate is back, i.e.
    # (rate - quota) / quota * window = (2000 - 1000) / 1000 * 10 s.
    throttle = quotas.record(PRODUCE, "alice", "c", 11_000)
    assert throttle == 10_000
    # Time passing with nothing sent brings the rate down: old windows expire.
    clock.now += 30
    assert quotas.record(PRODUCE, "alice", "c", 100) == 0


def test_steady_producer_is_held_to_its_quota() -> None:
    """A client that waits as told ends up at its quota: simulated for 60 s."""
    clock = Clock()
    quotas = QuotaManager(clock=clock)
    quotas.load([((("user", "alice"),), {PRODUCE: 1_000_000.0})])
    start, sent = clock.now, 0
    while clock.now - start < 60:
        sent += 100_000
        throttle = quotas.record(PRODUCE, "alice", "c", 100_000)
        clock.now += 0.01 + throttle / 1000
    rate = sent / (clock.now - start)
    assert 0.9e6 < rate < 1.3e6, rate


def test_a_throttle_is_at_most_the_measured_span() -> None:
    """Kafka's bound: however far over a tiny quota, a client waits at most the span the
    rate is measured over (quota.window.num x quota.window.size.seconds)."""
    quotas = QuotaManager(window_s=1.0, samples=11, clock=Clock())
    quotas.load([((("user", "alice"),), {PRODUCE: 1.0})])
    assert quotas.record(PRODUCE, "alice", "c", 10**9) == 11_000
