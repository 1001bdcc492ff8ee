"""The sink's exactly-once mode: a write's rows become visible once, across task
retries, zombie tasks and query restarts, by a two-phase commit over Kafka transactions.

A write is named by a *writer id* (the streaming query's id, or ``transactionalIdPrefix``)
and a *version* that grows with each write of that writer (the micro-batch id, or
``writeVersion``). Task ``p`` of a write uses the transactional id ``<writer>-<p>``.

Phase one, in each task (``prepare``):

1. ``init_transactions`` fences every earlier attempt of this task (a retried task, a
   zombie still running somewhere) and aborts the transaction it left open.
2. The versions this task has committed are offsets of the consumer group named by the
   same id. If one is at or past this write's version, the write already committed for
   this task (a micro-batch re-run after Spark lost its own commit of the batch): the
   task writes nothing.
3. Otherwise the rows go out in a transaction, with the version committed as the group's
   offset in the same transaction, and everything is acknowledged; the transaction is
   left open and the task returns its id, producer id and epoch.

Phase two, where Spark commits the write (``commit``): EndTxn(commit) for each task's
transaction. Spark calls it only when every task succeeded; a task that failed, even after
its Python ``write`` returned (Spark's Python runner can end a task's input early without
an error when the stage above it dies), never has its transaction committed: the next
attempt's ``init_transactions`` aborts it, or the coordinator does after
``transaction.timeout.ms``. Committing in the task would have made such a truncated
input visible. If the commit itself fails part-way, the batch fails and its re-run skips
the tasks whose version committed and writes the others again.

What this needs, as any exactly-once sink does: a re-run of a version gives each task the
same rows (a deterministic plan over a replayable source, which a checkpointed streaming
query is); the number of tasks per write stays the same across a restart; speculative
execution off (two attempts of one task fence each other); and a write shorter than the
transaction timeout (``kafka.transaction.timeout.ms``, 60 s by default, at most the
brokers' ``transaction.max.timeout.ms``). Readers see the rows once only with
``isolation.level=read_committed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from partita.client.cluster import Cluster
from partita.client.group_admin import group_offsets
from partita.client.producer import AsyncProducer
from partita.client.security import security_of
from partita.client.transactions import TransactionError, Transactions
from partita.errors import KafkaError
from partita.spark.options import SinkOptions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared:
    """A task's open transaction, for the commit (pickled from the task to Spark's
    committing process)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


def transactional_id(writer: str, task: int) -> str:
    return f"{writer}-{task}"


async def prepare(
    options: SinkOptions,
    writer: str,
    version: int,
    task: int,
    first_topic: str,
    produce: Callable[[AsyncProducer], Awaitable[int]],
) -> tuple[Prepared | None, int]:
    """Run ``produce`` (which sends the task's rows and returns their count) in a
    transaction left open; (None, 0) when this task already committed ``version``."""
    tid = transactional_id(writer, task)
    producer = AsyncProducer(
        options.bootstrap_servers,
        transactional_id=tid,
        security=security_of(options.security),
        client_id=f"partita-sink-{tid}",
        **options.producer,
    )
    try:
        await producer.start()
        await producer.init_transactions()
        done = await committed_version(producer, tid)
        if done is not None and done >= version:
            log.info(
                "write already committed: nothing written again",
                extra={"transactional_id": tid, "version": version, "committed": done},
            )
            return None, 0
        producer.begin_transaction()
        try:
            rows = await produce(producer)
            await producer.send_offsets_to_transaction({(first_topic, 0): version}, tid)
            await producer.flush()
        except BaseException as exc:
            # Aborted now rather than at the timeout: an open transaction holds back what
            # read_committed readers of these partitions see.
            if not (isinstance(exc, TransactionError) and exc.fatal):
                with contextlib.suppress(Exception):
                    await producer.abort_transaction()
            raise
        return Prepared(tid, producer.producer_id, producer.producer_epoch), rows
    finally:
        # Closed without ending the transaction: the commit, or the next attempt, does.
        with contextlib.suppress(Exception):
            await producer.stop()


async def end_all(options: SinkOptions, prepared: list[Prepared], commit: bool) -> None:
    """EndTxn for every prepared transaction, a few at a time; raises the first failure
    (after trying them all)."""
    cluster = Cluster(
        options.bootstrap_servers, "partita-sink-commit", security=security_of(options.security)
    )
    limit = asyncio.Semaphore(16)

    async def end(one: Prepared) -> None:
        async with limit:
            txn = Transactions.resume(
                cluster, one.transactional_id, one.producer_id, one.producer_epoch
            )
            try:
                await txn.end(commit=commit)
            finally:
                await txn.close()

    try:
        await cluster.refresh([])
        results = await asyncio.gather(*(end(p) for p in prepared), return_exceptions=True)
    finally:
        await cluster.close()
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        verb = "commit" if commit else "abort"
        raise KafkaError(
            f"could not {verb} {len(failures)} of {len(prepared)} task transactions: {failures[0]}"
        ) from failures[0]


async def committed_version(producer: AsyncProducer, tid: str) -> int | None:
    """The highest version this transactional id has committed, or None. Read after
    ``init_transactions``, which returns only once the id's previous transaction is
    complete, its offsets included: what is read here is settled."""
    offsets = await group_offsets(producer.cluster, tid)
    return max(offsets.values(), default=None)
