"""Reassignment plans proposed in the console, and the rule that each runs once (sans-IO).

A plan is made by ``cluster/rebalance_plan.py`` (the one ``partita reassign plan`` uses:
as few moves as possible) and kept under a random token. Executing claims the token; a
second confirmation of the same plan (a double click, a resent form, a second tab) finds
it claimed and is told so: nothing is sent to the controller twice.
"""

from __future__ import annotations

import secrets
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from partita.cluster.rebalance_plan import moves as moved_replicas
from partita.cluster.rebalance_plan import plan as minimal_moves
from partita.console.model import TopicPartition

Assignment = dict[TopicPartition, list[int]]
KEPT_PLANS = 50


class PlanError(Exception):
    """A plan that cannot be executed: unknown, or already executed."""


@dataclass(slots=True)
class Plan:
    token: str
    brokers: tuple[int, ...]
    current: Assignment
    planned: Assignment
    moved_replicas: int
    bytes_to_move: int
    started_at: float | None = None
    results: dict[TopicPartition, tuple[int, str | None]] = field(default_factory=dict)

    @property
    def changed(self) -> list[TopicPartition]:
        return [tp for tp in sorted(self.planned) if self.planned[tp] != self.current.get(tp)]

    @property
    def targets(self) -> Assignment:
        return {tp: self.planned[tp] for tp in self.changed}


def bytes_to_move(
    current: Mapping[TopicPartition, Sequence[int]],
    planned: Assignment,
    sizes: Mapping[TopicPartition, int],
) -> int:
    """Each new replica copies its partition (the leader's size)."""
    total = 0
    for tp, replicas in planned.items():
        added = set(replicas) - set(current.get(tp, ()))
        total += len(added) * sizes.get(tp, 0)
    return total


class PlanBook:
    def __init__(self) -> None:
        self._plans: dict[str, Plan] = {}

    def propose(
        self,
        current: Mapping[TopicPartition, Sequence[int]],
        brokers: Sequence[int],
        racks: Mapping[int, str | None],
        sizes: Mapping[TopicPartition, int],
    ) -> Plan:
        planned = minimal_moves(current, brokers, racks)
        plan = Plan(
            secrets.token_urlsafe(12),
            tuple(sorted(brokers)),
            {tp: list(r) for tp, r in current.items()},
            planned,
            moved_replicas(current, planned),
            bytes_to_move(current, planned, sizes),
        )
        self._plans[plan.token] = plan
        while len(self._plans) > KEPT_PLANS:
            del self._plans[next(iter(self._plans))]
        return plan

    def get(self, token: str) -> Plan:
        plan = self._plans.get(token)
        if plan is None:
            raise PlanError(
                "this plan is not known here (too old, or the console restarted): plan again"
            )
        return plan

    def claim(
        self,
        token: str,
        now: float,
        replicas: Mapping[TopicPartition, Sequence[int]],
        moving: Collection[TopicPartition],
    ) -> Plan:
        """The plan to execute, marked started. PlanError if it already was, or if it is
        stale: a plan sets whole replica lists, so drawn before other moves it would undo
        them; it runs only while every partition it changes still has the ``replicas`` it
        was drawn from and none is ``moving``."""
        plan = self.get(token)
        if plan.started_at is not None:
            raise PlanError("this plan was already executed: it runs once; its progress is below")
        busy = sorted(set(plan.targets) & set(moving))
        if busy:
            raise PlanError(
                f"{len(busy)} of these partitions are being moved already (e.g. "
                f"{busy[0][0]}-{busy[0][1]}): wait for that to finish, then plan again"
            )
        changed = [tp for tp in plan.targets if list(replicas.get(tp, ())) != plan.current[tp]]
        if changed:
            raise PlanError(
                f"the cluster changed since this plan was made ({len(changed)} partitions, "
                f"e.g. {changed[0][0]}-{changed[0][1]}, no longer have the replicas it started "
                "from): plan again"
            )
        plan.started_at = now
        return plan
