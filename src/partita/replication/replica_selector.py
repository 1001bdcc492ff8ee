"""Which replica a consumer should read from (KIP-392), sans-IO.

With ``replica.selector.class`` set to Kafka's RackAwareReplicaSelector, a consumer that
says which rack it is in (Fetch's RackId, librdkafka's ``client.rack``) is sent to an
in-sync replica in that rack, so its reads stay within the rack; the leader is kept when
it is in that rack itself or no in-sync replica is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

RACK_AWARE_NAMES = frozenset(
    {"org.apache.kafka.common.replica.RackAwareReplicaSelector", "rack-aware"}
)
NONE = -1


def preferred_read_replica(
    selector: str,
    client_rack: str | None,
    leader: int,
    isr: Sequence[int],
    racks: Mapping[int, str | None],
) -> int:
    """The replica id the consumer should fetch from instead of ``leader``; -1: stay."""
    if selector not in RACK_AWARE_NAMES or not client_rack:
        return NONE
    if racks.get(leader) == client_rack:
        return NONE
    for replica in sorted(isr):
        if replica != leader and racks.get(replica) == client_rack:
            return replica
    return NONE
