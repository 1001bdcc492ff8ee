"""ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments: requests for
the active controller (``cluster.controller``). Another broker answers NOT_CONTROLLER,
and clients find the controller in Metadata and ask again, as with Kafka. A broker alone
leads every partition already: nothing to elect, nowhere to move replicas to."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import (
    AlterPartitionReassignmentsResponse,
    ElectLeadersResponse,
    ListPartitionReassignmentsResponse,
)

from partita.cluster.controller import Controller
from partita.cluster.preferred import ELECTION_NOT_NEEDED
from partita.errors import KafkaError, NotControllerError
from partita.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    ElectLeadersRequest,
    ListPartitionReassignmentsRequest,
)
from partita.server.broker import Broker
from partita.server.request_context import RequestContext

_MESSAGES = {
    80: "the preferred leader is not alive or not in the ISR",
    83: "no live replica can lead",
    84: "the preferred leader already leads",
    3: "no such partition",
}


def _controller(broker: Broker) -> Controller:
    """The active controller if it runs here; raises NOT_CONTROLLER if it runs elsewhere
    (a broker alone is its own)."""
    controller = broker.cluster.controller
    if not controller.active:
        raise NotControllerError(
            f"broker {broker.node_id} is not the controller "
            f"(broker {broker.store.controller_id} is)"
        )
    return controller


async def handle_elect_leaders(
    broker: Broker, context: RequestContext, request: ElectLeadersRequest
) -> Any:
    kind = request.election_type if context.api_version >= 1 else 0
    wanted = (
        None
        if request.topic_partitions is None
        else [(t.topic, p) for t in request.topic_partitions for p in t.partitions]
    )
    denied = context.access.cluster()
    try:
        if denied:
            # Every partition asked about carries the refusal (v0 has no top-level error).
            results = dict.fromkeys(wanted or [], denied)
            return _elected(results, error_code=denied)
        results = await _controller(broker).elect_leaders(kind, wanted)
    except KafkaError as exc:
        return ElectLeadersResponse(
            throttle_time_ms=0, error_code=exc.code, replica_election_results=[]
        )
    if wanted is None:
        # Asked for every partition, Kafka's controller answers only for those it tried
        # to elect: the ones whose leader is already right are left out.
        results = {k: code for k, code in results.items() if code != ELECTION_NOT_NEEDED}
    return _elected(results, error_code=0)


def _elected(results: dict[tuple[str, int], int], error_code: int) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), code in sorted(results.items()):
        by_topic.setdefault(topic, []).append(
            ElectLeadersResponse.ReplicaElectionResult.PartitionResult(
                partition_id=index, error_code=code, error_message=_MESSAGES.get(code)
            )
        )
    return ElectLeadersResponse(
        throttle_time_ms=0,
        error_code=error_code,
        replica_election_results=[
            ElectLeadersResponse.ReplicaElectionResult(topic=t, partition_result=ps)
            for t, ps in by_topic.items()
        ],
    )


async def handle_alter_reassignments(
    broker: Broker, _context: RequestContext, request: AlterPartitionReassignmentsRequest
) -> Any:
    targets = {
        (t.name, p.partition_index): (None if p.replicas is None else list(p.replicas))
        for t in request.topics
        for p in t.partitions
    }
    results: dict[tuple[str, int], tuple[int, str | None]]
    try:
        results = await _controller(broker).reassign(targets)
    except KafkaError as exc:
        return AlterPartitionReassignmentsResponse(
            throttle_time_ms=0, error_code=exc.code, error_message=exc.message, responses=[]
        )
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), (code, message) in sorted(results.items()):
        by_topic.setdefault(topic, []).append(
            AlterPartitionReassignmentsResponse.ReassignableTopicResponse.ReassignablePartitionResponse(
                partition_index=index, error_code=code, error_message=message
            )
        )
    return AlterPartitionReassignmentsResponse(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        responses=[
            AlterPartitionReassignmentsResponse.ReassignableTopicResponse(name=t, partitions=ps)
            for t, ps in by_topic.items()
        ],
    )


def handle_list_reassignments(
    broker: Broker, _context: RequestContext, request: ListPartitionReassignmentsRequest
) -> Any:
    wanted = (
        None
        if request.topics is None
        else [(t.name, p) for t in request.topics for p in t.partition_indexes]
    )
    try:
        controller = _controller(broker)
    except KafkaError as exc:
        return ListPartitionReassignmentsResponse(
            throttle_time_ms=0, error_code=exc.code, error_message=exc.message, topics=[]
        )
    ongoing = controller.reassignments(wanted)
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), state in sorted(ongoing.items()):
        by_topic.setdefault(topic, []).append(
            ListPartitionReassignmentsResponse.OngoingTopicReassignment.OngoingPartitionReassignment(
                partition_index=index,
                replicas=state.replicas,
                adding_replicas=state.adding,
                removing_replicas=state.removing,
            )
        )
    return ListPartitionReassignmentsResponse(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        topics=[
            ListPartitionReassignmentsResponse.OngoingTopicReassignment(name=t, partitions=ps)
            for t, ps in by_topic.items()
        ],
    )
