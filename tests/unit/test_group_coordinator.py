"""The classic group state machine, driven directly (no broker, no sockets)."""

from __future__ import annotations

from typing import Any

from partita.coordinator.group_machine import (
    FENCED_INSTANCE_ID,
    GROUP_ID_NOT_FOUND,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_GROUP_ID,
    INVALID_SESSION_TIMEOUT,
    MEMBER_ID_REQUIRED,
    NON_EMPTY_GROUP,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    CommittedOffset,
    GroupCoordinator,
    GroupState,
    JoinRequest,
    JoinResult,
    SyncRequest,
    SyncResult,
)
from partita.coordinator.offset_records import (
    group_partition,
    java_string_hash,
    offset_key,
    offset_value,
    parse_key,
    parse_offset_value,
)


class Harness:
    def __init__(self, delay: int = 0) -> None:
        self.delivered: dict[str, Any] = {}
        self.core = GroupCoordinator(self._deliver, initial_rebalance_delay_ms=delay)
        self.now = 1_000_000

    def _deliver(self, handle: Any, result: JoinResult | SyncResult) -> None:
        self.delivered[handle] = result

    def join(
        self,
        member_id: str = "",
        *,
        handle: str = "h",
        instance: str | None = None,
        protocols: list[tuple[str, bytes]] | None = None,
        version: int = 5,
        group: str = "g",
        protocol_type: str = "consumer",
    ) -> JoinResult | None:
        request = JoinRequest(
            group,
            member_id,
            instance,
            "client",
            "/127.0.0.1",
            10_000,
            20_000,
            protocol_type,
            protocols or [("range", b"m")],
            version,
        )
        return self.core.join(request, handle, self.now)

    def join_new(self, handle: str, **kw: Any) -> str:
        """Two-step join of a dynamic member: returns its member id (join is parked)."""
        first = self.join(handle=handle, **kw)
        assert first is not None and first.error == MEMBER_ID_REQUIRED
        assert self.join(first.member_id, handle=handle, **kw) is None
        return first.member_id

    def tick(self, ms: int) -> None:
        self.now += ms
        self.core.tick(self.now)


def test_member_id_required_then_join_completes() -> None:
    h = Harness()
    member = h.join_new("a")
    result = h.delivered["a"]
    assert result.error == NONE and result.generation == 1
    assert result.member_id == member and result.leader == member
    assert result.protocol_name == "range"
    assert [m[0] for m in result.members] == [member]
    assert h.core.groups["g"].state is GroupState.COMPLETING_REBALANCE
    assert (
        h.core.sync(SyncRequest("g", 1, member, None, None, None, {member: b"assign"}), "s", h.now)
        is None
    )
    assert h.delivered["s"].assignment == b"assign"
    assert h.core.groups["g"].state is GroupState.STABLE


def test_second_member_triggers_rebalance_and_both_get_assignments() -> None:
    h = Harness()
    a = h.join_new("a1")
    h.core.sync(SyncRequest("g", 1, a, None, None, None, {a: b"all"}), "s1", h.now)
    b = h.join_new("b1")
    assert h.core.groups["g"].state is GroupState.PREPARING_REBALANCE
    assert h.core.heartbeat("g", 1, a, None, h.now) == REBALANCE_IN_PROGRESS
    assert h.join(a, handle="a2") is None  # a rejoins; now everyone has
    assert h.delivered["a2"].generation == 2 and h.delivered["b1"].generation == 2
    leader = h.delivered["a2"].leader
    assert leader == a and len(h.delivered["a2"].members) == 2
    assert h.delivered["b1"].members == []
    assert h.core.sync(SyncRequest("g", 2, b, None, None, None, {}), "sb", h.now) is None
    assert "sb" not in h.delivered  # followers wait for the leader
    h.core.sync(SyncRequest("g", 2, a, None, None, None, {a: b"p0", b: b"p1"}), "sa", h.now)
    assert h.delivered["sb"].assignment == b"p1" and h.delivered["sa"].assignment == b"p0"
    assert h.core.heartbeat("g", 2, b, None, h.now) == NONE
    assert h.core.heartbeat("g", 1, b, None, h.now) == ILLEGAL_GENERATION
    assert h.core.heartbeat("g", 2, "nobody", None, h.now) == UNKNOWN_MEMBER_ID


def test_bad_joins() -> None:
    h = Harness()
    assert h.join(group="").error == INVALID_GROUP_ID  # type: ignore[union-attr]
    request = JoinRequest("g", "", None, "c", "h", 10, 20_000, "consumer", [("range", b"")])
    assert h.core.join(request, "x", h.now).error == INVALID_SESSION_TIMEOUT  # type: ignore[union-attr]
    assert h.join("ghost").error == UNKNOWN_MEMBER_ID  # type: ignore[union-attr]
    h.join_new("a")
    other = h.join(handle="b", protocols=[("roundrobin", b"")])
    assert other is not None and other.error == INCONSISTENT_GROUP_PROTOCOL


def test_session_timeout_removes_member_and_rebalances() -> None:
    h = Harness()
    a = h.join_new("a")
    b = h.join_new("b")
    h.join(a, handle="a2")
    generation = h.delivered["a2"].generation
    h.core.sync(SyncRequest("g", generation, a, None, None, None, {a: b"x", b: b"y"}), "sa", h.now)
    h.core.sync(SyncRequest("g", generation, b, None, None, None, {}), "sb", h.now)
    for _ in range(12):  # a keeps heartbeating, b has died
        h.tick(1000)
        h.core.heartbeat("g", h.core.groups["g"].generation, a, None, h.now)
    group = h.core.groups["g"]
    assert b not in group.members and group.state is GroupState.PREPARING_REBALANCE
    h.join(a, handle="a3")
    assert h.delivered["a3"].generation == generation + 1
    assert [m[0] for m in h.delivered["a3"].members] == [a]


def test_leave_group_and_empty_group() -> None:
    h = Harness()
    a = h.join_new("a")
    assert h.core.leave("g", [(a, None)], h.now) == [NONE]
    group = h.core.groups["g"]
    assert group.state in (GroupState.PREPARING_REBALANCE, GroupState.EMPTY)
    h.tick(30_000)
    assert group.state is GroupState.EMPTY and not group.members
    assert h.core.leave("g", [("nobody", None)], h.now) == [UNKNOWN_MEMBER_ID]


def test_initial_rebalance_delay_waits_for_more_members() -> None:
    h = Harness(delay=3000)
    a = h.join_new("a")
    h.tick(1000)
    b = h.join_new("b")
    assert "a" not in h.delivered and "b" not in h.delivered
    h.tick(2500)  # first delay over, but a member joined meanwhile: wait again
    assert "a" not in h.delivered
    h.tick(3000)
    assert h.delivered["a"].generation == 1 and h.delivered["b"].generation == 1
    assert {m[0] for m in h.delivered["a"].members} == {a, b}


def test_static_member_restart_gets_assignment_without_rebalance() -> None:
    h = Harness()
    assert h.join(handle="a", instance="i-a") is None
    a = h.delivered["a"].member_id
    h.core.sync(SyncRequest("g", 1, a, "i-a", None, None, {a: b"mine"}), "s", h.now)
    again = h.join(handle="a-restarted", instance="i-a")
    assert again is not None and again.error == NONE and again.generation == 1
    assert again.member_id != a
    group = h.core.groups["g"]
    assert group.state is GroupState.STABLE
    sync = h.core.sync(SyncRequest("g", 1, again.member_id, "i-a", None, None, {}), "s2", h.now)
    assert sync is not None and sync.assignment == b"mine"
    # The old incarnation is fenced.
    assert h.core.heartbeat("g", 1, a, "i-a", h.now) == FENCED_INSTANCE_ID


def test_offset_commit_rules() -> None:
    h = Harness()
    assert h.core.validate_offset_commit("simple", -1, "", None, h.now, 8) == NONE
    assert h.core.validate_offset_commit("other", 3, "m", None, h.now, 9) == GROUP_ID_NOT_FOUND
    a = h.join_new("a")
    assert h.core.validate_offset_commit("g", 1, a, None, h.now, 8) == REBALANCE_IN_PROGRESS
    h.core.sync(SyncRequest("g", 1, a, None, None, None, {a: b""}), "s", h.now)
    assert h.core.validate_offset_commit("g", 1, a, None, h.now, 8) == NONE
    assert h.core.validate_offset_commit("g", 0, a, None, h.now, 8) == ILLEGAL_GENERATION
    assert h.core.validate_offset_commit("g", -1, "", None, h.now, 8) == UNKNOWN_MEMBER_ID
    h.core.store_offset("g", "t", 0, CommittedOffset(42, 3, "meta", h.now))
    assert h.core.delete_group("g", h.now)[0] == NON_EMPTY_GROUP


def test_offsets_of_empty_groups_expire() -> None:
    h = Harness()
    h.core.validate_offset_commit("idle", -1, "", None, h.now, 8)
    h.core.store_offset("idle", "t", 0, CommittedOffset(5, -1, "", h.now))
    assert h.core.expire_offsets(h.now + 59_000, 60_000) == []
    assert h.core.expire_offsets(h.now + 60_000, 60_000) == [("idle", "t", 0)]
    assert "idle" not in h.core.groups


def test_offset_records_roundtrip_and_partitioning() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("my-group") == -1906497762
    assert group_partition("polygenelubricants", 50) == 0  # hashCode is Integer.MIN_VALUE
    assert group_partition("my-group", 50) == 12
    assert parse_key(offset_key("g", "t", 7)) == ("g", "t", 7)
    value = CommittedOffset(123, 4, "meta", 1000)
    assert parse_offset_value(offset_value(value)) == value
    expiring = CommittedOffset(9, -1, "", 1000, 5000)
    assert parse_offset_value(offset_value(expiring)) == expiring


def test_rebalances_and_removals_are_logged_with_their_reason(caplog: Any) -> None:
    caplog.set_level("INFO", logger="partita.coordinator.group_machine")
    h = Harness()
    a = h.join_new("a")
    h.core.sync(SyncRequest("g", 1, a, None, None, None, {a: b"x"}), "sa", h.now)
    b = h.join_new("b")
    h.tick(11_000)  # a never rejoined nor heartbeated: its session ran out
    events = [(r.getMessage(), getattr(r, "reason", None)) for r in caplog.records]
    assert ("preparing to rebalance group", f"member {b} joined") in events
    assert ("removing member from group", "session timed out") in events
    stabilized = [r for r in caplog.records if r.getMessage() == "stabilized group"]
    # b alone once a is gone: it leads generation 2
    assert [(r.generation, r.leader, r.members) for r in stabilized] == [(1, a, 1), (2, b, 1)]  # type: ignore[attr-defined]
