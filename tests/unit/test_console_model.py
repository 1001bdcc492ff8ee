"""The console's sans-IO core: roles, loads, skew, rates, hot keys, advice, plans."""

from __future__ import annotations

from collections import Counter

import pytest

from partita.console.advisor import Measurement, advise
from partita.console.history import History, trend
from partita.console.hot_keys import SHOWN_KEY_CHARS, rank
from partita.console.model import (
    Broker,
    Group,
    PartitionLag,
    PartitionState,
    Snapshot,
    Topic,
    broker_loads,
    leader_spread,
    page_of,
    shares,
)
from partita.console.reassign_plans import PlanBook, PlanError, bytes_to_move


def part(
    topic: str,
    index: int,
    leader: int,
    replicas: tuple[int, ...],
    isr: tuple[int, ...] | None = None,
    start: int = 0,
    end: int = 0,
    size: int = 0,
) -> PartitionState:
    return PartitionState(
        topic, index, leader, replicas, replicas if isr is None else isr, (), start, end,
        dict.fromkeys(replicas, size),
    )  # fmt: skip


def snapshot(*topics: Topic, alive: tuple[int, ...] = (1, 2, 3), at: float = 100.0) -> Snapshot:
    brokers = tuple(Broker(b, "127.0.0.1", 9000 + b, None) for b in alive)
    return Snapshot(at, "c", alive[0], brokers, topics)


def test_roles_and_troubles_of_a_partition() -> None:
    p = part("t", 0, 1, (1, 2, 3), isr=(1, 2))
    assert [p.role(b) for b in (1, 2, 3, 4)] == ["leader", "follower", "out-of-sync", ""]
    assert p.under_replicated and not p.offline
    assert part("t", 1, -1, (1, 2)).offline


def test_a_dead_broker_still_named_by_replicas_is_listed_as_down() -> None:
    snap = snapshot(Topic("t", False, (part("t", 0, 1, (1, 4)),)), alive=(1, 2))
    assert snap.broker_ids == [1, 2, 4]
    assert snap.dead_brokers == [4]


def test_loads_count_leaders_and_kafkas_imbalance_per_broker() -> None:
    # Broker 2 prefers two partitions and leads neither (broker 1 took them over).
    t = Topic(
        "t", False, (part("t", 0, 1, (2, 1)), part("t", 1, 1, (2, 3)), part("t", 2, 1, (1, 3)))
    )
    loads = {load.node_id: load for load in broker_loads(snapshot(t))}
    assert (loads[1].leaders, loads[2].leaders, loads[3].leaders) == (3, 0, 0)
    assert loads[2].not_preferred_leader == 2 and loads[2].imbalance == 100.0
    assert loads[1].imbalance == 0.0
    assert leader_spread(list(loads.values()), {1, 2, 3}) == pytest.approx(200.0)


def test_internal_topics_are_left_out_of_the_loads() -> None:
    snap = snapshot(Topic("__consumer_offsets", True, (part("__consumer_offsets", 0, 1, (1,)),)))
    assert all(load.leaders == 0 for load in broker_loads(snap))


def test_a_partition_holding_twice_its_fair_share_is_hot() -> None:
    t = Topic(
        "t",
        False,
        (
            part("t", 0, 1, (1,), end=900),
            part("t", 1, 2, (2,), end=50),
            part("t", 2, 3, (3,), end=50),
        ),
    )
    flagged = [s.partition for s in shares(t) if s.hot]
    assert flagged == [0]
    even = Topic("e", False, tuple(part("e", i, 1, (1,), end=300) for i in range(3)))
    assert not any(s.hot for s in shares(even))
    # Too few records for shares to mean anything.
    small = Topic("s", False, (part("s", 0, 1, (1,), end=9), part("s", 1, 1, (1,), end=0)))
    assert not any(s.hot for s in shares(small))


def test_traffic_alone_can_make_a_partition_hot() -> None:
    t = Topic("t", False, tuple(part("t", i, 1, (1,), end=1000) for i in range(4)))
    hot = [s.partition for s in shares(t, {0: 10.0, 1: 10.0, 2: 10.0, 3: 200.0}) if s.hot]
    assert hot == [3]


def test_pages_of_a_long_list() -> None:
    every = list(range(250))
    shown, page, pages = page_of(every, 3, 120)
    assert (page, pages) == (3, 3) and list(shown) == list(range(240, 250))
    assert page_of(every, 99, 120) == (shown, 3, 3)  # past the end: the last page
    assert page_of(every, -4, 120)[1] == 1
    assert page_of([], 1, 120) == ([], 1, 1)


def test_rates_come_from_the_window_and_survive_a_recreated_topic() -> None:
    history = History(window_s=60)
    for at, end, size in ((0.0, 0, 0), (10.0, 500, 50_000), (20.0, 1000, 100_000)):
        history.add(
            snapshot(Topic("t", False, (part("t", 0, 1, (1,), end=end, size=size),)), at=at)
        )
    assert history.rates("t")[0] == pytest.approx((50.0, 5000.0))
    # Deleted and created again: offsets start over; the rate counts from there.
    history.add(snapshot(Topic("t", False, (part("t", 0, 1, (1,), end=100, size=1),)), at=30.0))
    history.add(snapshot(Topic("t", False, (part("t", 0, 1, (1,), end=300, size=2),)), at=40.0))
    assert history.rates("t")[0][0] == pytest.approx(20.0)
    # Older than the window: forgotten.
    history.add(snapshot(at=200.0))
    assert history.rates("t") == {}


def test_a_new_topic_keeps_the_others_rates() -> None:
    history = History()
    one = Topic("t", False, (part("t", 0, 1, (1,), end=0),))
    history.add(snapshot(one, at=0.0))
    history.add(
        snapshot(Topic("t", False, (part("t", 0, 1, (1,), end=100, size=10_000),)), at=10.0)
    )
    # Another topic appears: t's rate is still measured from the first sample.
    t_now = Topic("t", False, (part("t", 0, 1, (1,), end=300, size=30_000),))
    history.add(snapshot(Topic("a", False, (part("a", 0, 1, (1,), end=5),)), t_now, at=20.0))
    assert history.rates("t")[0] == pytest.approx((15.0, 1500.0))  # 100 B per record
    assert history.rates("a") == {0: (0.0, 0.0)}  # one sample of it: no rate yet


def test_a_trickle_of_traffic_does_not_make_a_partition_hot() -> None:
    t = Topic("t", False, tuple(part("t", i, 1, (1,), end=30) for i in range(3)))
    assert not any(s.hot for s in shares(t, {0: 0.0, 1: 0.0, 2: 0.01}))


def test_lag_history_and_its_trend() -> None:
    history = History()
    for at, committed in ((0.0, 0), (1.0, 300), (2.0, 600), (3.0, 900)):
        group = Group("g", "Stable", "range", (), (PartitionLag("t", 0, committed, 1000, None),))
        history.add(Snapshot(at, groups=(group,)))
    assert history.lag_series("g") == [1000, 700, 400, 100]
    assert history.partition_lag_series("g", "t", 0) == [1000, 700, 400, 100]
    assert trend(history.lag_series("g")) == "draining"
    assert trend([1, 1, 5, 9, 20, 40]) == "growing"
    assert trend([5, 5, 5]) == "steady"


def test_lag_is_unknown_without_a_commit() -> None:
    assert PartitionLag("t", 0, None, 10, None).lag is None
    assert PartitionLag("t", 0, -1, 10, None).lag is None
    assert PartitionLag("t", 0, 4, 10, None).lag == 6


def test_a_key_carrying_a_partitions_share_is_hot_and_no_key_never_is() -> None:
    keys: Counter[bytes | None] = Counter({b"hot": 600, None: 300, b"a": 50, b"b": 50})
    sample = rank("t", keys, partitions=3, at=0.0)
    assert [k.key for k in sample.hot] == ["hot"]
    assert sample.keys[1].key == "(no key)" and not sample.keys[1].hot
    assert not rank("t", Counter({b"hot": 600}), partitions=1, at=0.0).hot
    long = rank("t", Counter({b"x" * 500: 30}), partitions=2, at=0.0).keys[0].key
    assert len(long) == SHOWN_KEY_CHARS + 1 and long.endswith("…")


def test_advice_divides_by_the_slower_side_and_spreads_over_the_brokers() -> None:
    measured = Measurement(1024, "all", 1000, produce_mb_s=20.0, consume_mb_s=80.0, seconds=5)
    advice = advise(100, measured, brokers=3)
    assert (advice.needed, advice.partitions) == (5, 6)
    assert advise(20, measured, brokers=3).partitions == 3
    assert "per broker" in advise(100_000, measured, brokers=1).warnings[0]
    with pytest.raises(ValueError):
        advise(0, measured, brokers=3)
    with pytest.raises(ValueError):
        advise(10, Measurement(1024, "all", 0, 0.0, 0.0, 1), brokers=3)


def test_a_plan_executes_once() -> None:
    book = PlanBook()
    current = {("t", 0): [1, 3], ("t", 1): [3, 2]}
    plan = book.propose(current, [1, 2], {}, {("t", 0): 1000, ("t", 1): 10})
    assert all(3 not in replicas for replicas in plan.planned.values())
    assert plan.moved_replicas == 2 and plan.bytes_to_move == 1010
    with pytest.raises(PlanError, match="being moved already"):
        book.claim(plan.token, 1.0, current, moving={("t", 1)})
    with pytest.raises(PlanError, match="changed since this plan was made"):
        book.claim(plan.token, 1.0, {**current, ("t", 0): [2, 3]}, moving=())
    book.claim(plan.token, 1.0, current, moving=())
    with pytest.raises(PlanError, match="already executed"):
        book.claim(plan.token, 2.0, current, moving=())
    with pytest.raises(PlanError, match="not known"):
        book.claim("made-up", 2.0, current, moving=())
    assert bytes_to_move({("t", 0): [1]}, {("t", 0): [1, 2]}, {("t", 0): 7}) == 7
