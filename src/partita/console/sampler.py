"""One poll of the cluster per interval, shared by every open page.

The console learns everything through Kafka's APIs, as any client would (so it works
against Apache Kafka too): Metadata for brokers, leaders, replicas and ISRs; ListOffsets
for log start and end; DescribeLogDirs for sizes; ListGroups, DescribeGroups and
OffsetFetch for groups; ListPartitionReassignments for moves in progress. One task polls;
pages wait for the next snapshot, so ten open tabs cost the cluster what one does.

A sick cluster does not stall the console: each step has a deadline (the groups one in
all), a broker that does not answer is reported (``Snapshot.warnings``), its connection
dropped, and the rest is shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Any

import structlog

from partita.client.admin import AsyncAdmin, TopicDescription
from partita.client.security import ClientSecurity
from partita.console.history import History
from partita.console.model import (
    Broker,
    Group,
    Member,
    PartitionLag,
    PartitionState,
    Snapshot,
    Topic,
    TopicPartition,
)
from partita.protocol.consumer_requests import ListOffsetsRequestV7

log = structlog.get_logger("partita.console")

EARLIEST, LATEST = -2, -1
LOG_START_EVERY_S = 30.0
STEP_TIMEOUT_S = 5.0
METADATA_TIMEOUT_S = 2.0
METADATA_ATTEMPTS = 3
# However costly the last poll, the next one starts within this.
MAX_SPACING_S = 10.0
# Groups described per poll, at most: a cluster with thousands of groups shows the first
# ones by name (the groups page says so) rather than costing the cluster a poll each.
MAX_GROUPS = 200
GROUP_CONCURRENCY = 8
GROUPS_DEADLINE_S = 10.0


class Sampler:
    def __init__(
        self,
        bootstrap: str,
        security: ClientSecurity | Mapping[str, str] | None = None,
        interval_s: float = 2.0,
        client_id: str = "partita-console",
    ) -> None:
        self.bootstrap = bootstrap
        self.admin = AsyncAdmin(bootstrap, client_id=client_id, security=security)
        self.interval_s = interval_s
        self.history = History()
        self.snapshot = Snapshot(time.time(), error="waiting for the first answer")
        self.version = 0
        self.last_poll_s = 0.0
        self.last_poll_cpu_s = 0.0
        self._changed = asyncio.Condition()
        self._polling = asyncio.Lock()
        self._groups_known: list[Group] = []
        self._task: asyncio.Task[None] | None = None
        self._starts: dict[TopicPartition, int] = {}
        self._starts_at = -LOG_START_EVERY_S

    @property
    def requests_sent(self) -> int:
        return self.admin.cluster.tally.sent

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(Exception):
            await self.admin.stop()

    async def wait_newer(self, version: int, timeout: float) -> int:
        """The version after ``version`` once there is one, or ``version`` at timeout."""
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._changed.wait_for(lambda: self.version > version)
            return self.version

    async def poll_now(self) -> None:
        """Poll at once (after an action from a page, so it shows without waiting)."""
        await self._poll_and_publish()

    async def _poll_and_publish(self) -> None:
        # One poll at a time: a poll asked by a page while the loop polls would otherwise
        # publish an older snapshot after a newer one.
        async with self._polling:
            started, cpu_started = time.monotonic(), time.process_time()
            try:
                snapshot = await self.poll()
            except Exception as exc:  # a bug must not stop the polling for good
                log.exception("console.poll_crashed", error=str(exc))
                snapshot = Snapshot(time.time(), error=f"the console failed to poll: {exc}")
            self.last_poll_s = time.monotonic() - started
            self.last_poll_cpu_s = time.process_time() - cpu_started
            await self._publish(snapshot)

    async def _publish(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.history.add(snapshot)
        async with self._changed:
            self.version += 1
            self._changed.notify_all()

    async def _run(self) -> None:
        while True:
            await self._poll_and_publish()
            # A poll that costs much (10,000 partitions decoded) spaces the next one out:
            # the console spends at most a third of its time polling. Its CPU time is the
            # measure, not its duration: waiting for a broker that does not answer costs
            # nothing, and the pages would wait for nothing.
            spacing = min(2 * self.last_poll_cpu_s, MAX_SPACING_S)
            await asyncio.sleep(max(self.interval_s - self.last_poll_s, spacing))

    async def poll(self) -> Snapshot:
        now = time.time()
        failure: Exception | None = None
        for _attempt in range(METADATA_ATTEMPTS):
            try:
                async with asyncio.timeout(METADATA_TIMEOUT_S):
                    await self.admin.cluster.refresh([])
                    described = await self.admin.describe_cluster()
                    # A topic mid-creation or mid-deletion is left out until it settles.
                    topics = await self.admin.describe_topics(None, skip_errors=True)
                break
            except Exception as exc:
                failure = exc
                # The broker asked may be one that took the connection and stopped
                # answering (paused, its host cut off): the client would wait minutes for
                # it. Drop every connection and ask again: another broker, in turn.
                await self.admin.cluster.close()
        else:
            assert failure is not None
            log.warning("console.poll_failed", bootstrap=self.bootstrap, error=str(failure))
            return Snapshot(
                now,
                error=f"cannot read the cluster at {self.bootstrap}: {_reason(failure)}",
            )
        brokers = tuple(Broker(b.node_id, b.host, b.port, b.rack) for b in described.brokers)
        warnings: list[str] = []
        if failure is not None:
            warnings.append(
                f"a broker did not answer Metadata ({_reason(failure)}): another one did"
            )
        live = [b.node_id for b in brokers]
        offsets, sizes, groups, moves = await asyncio.gather(
            self._offsets(topics, warnings),
            self._sizes(live, warnings),
            self._groups(warnings),
            self._reassignments(warnings),
        )
        starts, ends = offsets
        built = tuple(
            Topic(
                t.name,
                t.internal,
                tuple(
                    PartitionState(
                        t.name,
                        p.partition,
                        p.leader,
                        tuple(p.replicas),
                        tuple(p.isr),
                        tuple(p.offline),
                        starts.get((t.name, p.partition)),
                        ends.get((t.name, p.partition)),
                        {
                            b: s[(t.name, p.partition)]
                            for b, s in sizes.items()
                            if (t.name, p.partition) in s
                        },
                    )
                    for p in t.partitions
                ),
            )
            for t in topics
        )
        lagged = tuple(_with_lag(g, ends) for g in groups)
        return Snapshot(
            now,
            described.cluster_id,
            described.controller,
            brokers,
            built,
            lagged,
            moves,
            warnings=tuple(warnings),
        )

    async def _offsets(
        self, topics: list[TopicDescription], warnings: list[str]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """Log end offsets every poll; log start offsets every LOG_START_EVERY_S (they move
        only with retention and DeleteRecords; at 10,000 partitions ListOffsets is most
        of a poll), and at once for a partition not asked before."""
        fresh_starts = time.monotonic() - self._starts_at >= LOG_START_EVERY_S
        by_leader: dict[int, dict[str, list[int]]] = {}
        for t in topics:
            for p in t.partitions:
                if p.leader >= 0:
                    by_leader.setdefault(p.leader, {}).setdefault(t.name, []).append(p.partition)
        starts: dict[TopicPartition, int] = {}
        ends: dict[TopicPartition, int] = {}

        async def ask(
            leader: int, asked: dict[str, list[int]], spec: int, into: dict[TopicPartition, int]
        ) -> None:
            request = ListOffsetsRequestV7(
                [(name, [(index, spec) for index in indexes]) for name, indexes in asked.items()]
            )
            connection = await self.admin.cluster.connection(leader)
            response: Any = await connection.request(request)
            for topic in response.topics:
                for p in topic.partitions:
                    if not p.error_code:
                        into[(topic.name, p.partition_index)] = p.offset

        async def both(leader: int, asked: dict[str, list[int]]) -> None:
            await ask(leader, asked, LATEST, ends)
            unknown = asked
            if not fresh_starts:
                unknown = {}
                for name, indexes in asked.items():
                    for index in indexes:
                        known = self._starts.get((name, index))
                        if known is None:
                            unknown.setdefault(name, []).append(index)
                        else:
                            starts[(name, index)] = known
            if unknown:
                await ask(leader, unknown, EARLIEST, starts)

        await self._each(
            {leader: both(leader, asked) for leader, asked in by_leader.items()},
            "offsets",
            warnings,
        )
        if fresh_starts:
            self._starts_at = time.monotonic()
        self._starts = starts
        return starts, ends

    async def _sizes(
        self, live: list[int], warnings: list[str]
    ) -> dict[int, dict[TopicPartition, int]]:
        sizes: dict[int, dict[TopicPartition, int]] = {}

        async def ask(node: int) -> None:
            sizes[node] = await self.admin.describe_log_dirs(node)

        await self._each({node: ask(node) for node in live}, "log sizes", warnings)
        return sizes

    async def _each(self, calls: dict[int, Any], what: str, warnings: list[str]) -> None:
        """Run one call per broker, each within the step deadline; a broker that fails is
        named in the warnings, the others' answers are kept."""

        async def bounded(node: int, call: Any) -> None:
            try:
                async with asyncio.timeout(STEP_TIMEOUT_S):
                    await call
            except Exception as exc:
                warnings.append(f"broker {node} did not answer for {what}: {_reason(exc)}")
                if isinstance(exc, TimeoutError):
                    await self.admin.cluster.drop_connection(node)

        await asyncio.gather(*(bounded(node, call) for node, call in calls.items()))

    async def _groups(self, warnings: list[str]) -> list[Group]:
        """Every group's members and committed offsets, within GROUPS_DEADLINE_S in all;
        when that runs out (a coordinator that does not answer, thousands of groups) the
        groups of the last complete poll are shown, and the page says so."""
        try:
            async with asyncio.timeout(GROUPS_DEADLINE_S):
                groups = await self._describe_groups(warnings)
        except Exception as exc:
            warnings.append(
                f"consumer groups not read this time ({_reason(exc)}): the last ones known "
                "are shown"
            )
            return self._groups_known
        self._groups_known = groups
        return groups

    async def _describe_groups(self, warnings: list[str]) -> list[Group]:
        listed = await self.admin.list_groups()
        if len(listed) > MAX_GROUPS:
            warnings.append(f"{len(listed)} groups: the first {MAX_GROUPS} by name are shown")
        gate = asyncio.Semaphore(GROUP_CONCURRENCY)

        async def describe(group_id: str, state: str) -> Group:
            async with gate:
                try:
                    async with asyncio.timeout(STEP_TIMEOUT_S):
                        info = await self.admin.describe_group(group_id)
                        committed = await self.admin.group_offsets(group_id)
                except Exception as exc:
                    return Group(group_id, state, "", (), (), error=_reason(exc))
            members = tuple(
                Member(m.member_id, m.client_id, m.host, tuple(m.assignment)) for m in info.members
            )
            owners = {tp: m.client_id or m.member_id for m in members for tp in m.assignment}
            partitions = tuple(
                PartitionLag(tp[0], tp[1], committed.get(tp), None, owners.get(tp))
                for tp in sorted(set(owners) | set(committed))
            )
            return Group(group_id, info.state, info.protocol, members, partitions)

        return list(
            await asyncio.gather(*(describe(g.group_id, g.state) for g in listed[:MAX_GROUPS]))
        )

    async def _reassignments(
        self, warnings: list[str]
    ) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        try:
            async with asyncio.timeout(STEP_TIMEOUT_S):
                return await self.admin.list_partition_reassignments()
        except Exception as exc:
            warnings.append(f"cannot list reassignments in progress: {_reason(exc)}")
            return {}


def _with_lag(group: Group, ends: dict[TopicPartition, int]) -> Group:
    return Group(
        group.group_id,
        group.state,
        group.protocol,
        group.members,
        tuple(
            PartitionLag(
                p.topic, p.partition, p.committed, ends.get((p.topic, p.partition)), p.owner
            )
            for p in group.partitions
        ),
        group.error,
    )


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return str(exc) or type(exc).__name__
