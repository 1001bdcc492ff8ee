"""DescribeTopicPartitions' paging (Kafka's rules, KRaftMetadataCache): topics in name
order from the cursor on, at most the limit of partitions, the cursor at the first
partition left out."""

from __future__ import annotations

from partita.server.handlers.topic_partitions import PageEntry, plan_page

COUNTS = {"a": 3, "b": 2, "c": 4}


def page(
    names: list[str], cursor: tuple[str, int] | None, limit: int
) -> tuple[list[tuple[str, list[int] | None]], tuple[str, int] | None]:
    entries, nxt = plan_page(names, COUNTS.get, cursor, limit)
    return [
        (e.topic, list(e.partitions) if e.partitions is not None else None) for e in entries
    ], nxt


def test_everything_fits() -> None:
    assert page(["a", "b", "c"], None, 2000) == (
        [("a", [0, 1, 2]), ("b", [0, 1]), ("c", [0, 1, 2, 3])],
        None,
    )


def test_a_topic_cut_short_is_answered_in_part() -> None:
    assert page(["a", "b", "c"], None, 4) == ([("a", [0, 1, 2]), ("b", [0])], ("b", 1))


def test_a_limit_reached_at_a_topics_end_points_at_the_next_topic() -> None:
    assert page(["a", "b", "c"], None, 5) == ([("a", [0, 1, 2]), ("b", [0, 1])], ("c", 0))


def test_the_cursor_resumes_inside_a_topic_and_skips_the_topics_before() -> None:
    assert page(["a", "b", "c"], ("b", 1), 3) == ([("b", [1]), ("c", [0, 1])], ("c", 2))


def test_walking_the_cursor_visits_every_partition_once() -> None:
    cursor: tuple[str, int] | None = None
    seen: list[tuple[str, int]] = []
    while True:
        entries, cursor = page(["a", "b", "c"], cursor, 2)
        seen += [(t, p) for t, ps in entries for p in ps or []]
        if cursor is None:
            break
    assert seen == [(t, p) for t in "abc" for p in range(COUNTS[t])]


def test_unknown_topics_take_no_partitions_and_a_limit_below_one_is_one() -> None:
    assert page(["a", "nope"], ("a", 2), 0) == ([("a", [2])], ("nope", 0))
    assert page(["nope", "b"], None, 1) == ([("nope", None), ("b", [0])], ("b", 1))


def test_the_limit_is_capped_at_kafkas_2000() -> None:
    entries, nxt = plan_page(["big"], lambda _n: 5000, None, 10_000)
    assert entries == [PageEntry("big", range(0, 2000))] and nxt == ("big", 2000)
