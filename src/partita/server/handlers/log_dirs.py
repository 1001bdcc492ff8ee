"""DescribeLogDirs: the broker's one log directory and the size of every partition in it,
as ``kafka-log-dirs --describe`` and admin clients' ``describe_log_dirs`` read them."""

from __future__ import annotations

import shutil
from typing import Any

from kafka.protocol.admin import DescribeLogDirsResponse

from partita.protocol.messages import DescribeLogDirsRequest
from partita.server.broker import Broker
from partita.server.request_context import RequestContext

_Result = DescribeLogDirsResponse.DescribeLogDirsResult
_Topic = _Result.DescribeLogDirsTopic
_Partition = _Topic.DescribeLogDirsPartition


def handle_describe_log_dirs(
    broker: Broker, context: RequestContext, request: DescribeLogDirsRequest
) -> Any:
    denied = context.access.cluster()
    if denied:  # versions 1-2 cannot say why: they get no directories, as from Kafka
        return DescribeLogDirsResponse(throttle_time_ms=0, error_code=denied, results=[])
    wanted: dict[str, set[int]] | None = (
        None if request.topics is None else {t.topic: set(t.partitions) for t in request.topics}
    )
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), partition in sorted(broker.replicas.partitions.items()):
        if wanted is not None and index not in wanted.get(topic, ()):
            continue
        plog = partition.log
        by_topic.setdefault(topic, []).append(
            _Partition(
                partition_index=index,
                partition_size=plog.size_bytes,
                # Kafka reports the log end's distance from the high watermark here.
                offset_lag=max(0, plog.log_end_offset - plog.high_watermark),
                is_future_key=False,
            )
        )
    usage = shutil.disk_usage(broker.data_dir)
    result = _Result(
        error_code=0,
        log_dir=str(broker.data_dir.resolve()),
        topics=[_Topic(name=t, partitions=ps) for t, ps in by_topic.items()],
        total_bytes=usage.total,
        usable_bytes=usage.free,
    )
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=[result])
