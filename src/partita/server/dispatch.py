"""Which handler answers which API, and the shape every handler has.

A handler is a function ``(broker, context, request) -> response`` (a coroutine where it
may wait): ``request`` is the API's typed view (``protocol.messages``), ``context`` the
header and the principal (``request_context``). ``network`` calls ``HANDLERS`` and
nothing else, so whatever must see every request -- metrics, the authorizer
(``server/authorization.py``) -- sits at that one call.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol, TypeVar

from partita.protocol.api import ApiKey
from partita.protocol.file_region import FileRegion
from partita.server.broker import Broker
from partita.server.handlers import (
    acls,
    admin,
    api_versions,
    fetch,
    groups,
    leadership,
    log_dirs,
    metadata,
    offsets,
    produce,
    quotas,
    sasl,
    topic_partitions,
    transactions,
)
from partita.server.request_context import RequestContext

RequestT_contra = TypeVar("RequestT_contra", contravariant=True)
# A kafka-python response object (encoded by protocol.codec), the encoded chunks of a
# response (Fetch: file regions go out by sendfile), or None (acks=0: no response at all).
Response = Any | list[bytes | FileRegion] | None


class Handler(Protocol[RequestT_contra]):
    def __call__(
        self, broker: Broker, context: RequestContext, request: RequestT_contra, /
    ) -> Response | Awaitable[Response]: ...


HANDLERS: dict[ApiKey, Handler[Any]] = {
    ApiKey.API_VERSIONS: api_versions.handle,
    ApiKey.METADATA: metadata.handle,
    ApiKey.DESCRIBE_CLUSTER: metadata.handle_describe_cluster,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: topic_partitions.handle,
    ApiKey.PRODUCE: produce.handle,
    ApiKey.FETCH: fetch.handle,
    ApiKey.LIST_OFFSETS: offsets.handle_list_offsets,
    ApiKey.DELETE_RECORDS: offsets.handle_delete_records,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: offsets.handle_offset_for_leader_epoch,
    ApiKey.CREATE_TOPICS: admin.handle_create_topics,
    ApiKey.DELETE_TOPICS: admin.handle_delete_topics,
    ApiKey.CREATE_PARTITIONS: admin.handle_create_partitions,
    ApiKey.DESCRIBE_CONFIGS: admin.handle_describe_configs,
    ApiKey.ALTER_CONFIGS: admin.handle_alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: admin.handle_incremental_alter_configs,
    ApiKey.INIT_PRODUCER_ID: admin.handle_init_producer_id,
    ApiKey.DESCRIBE_LOG_DIRS: log_dirs.handle_describe_log_dirs,
    ApiKey.ELECT_LEADERS: leadership.handle_elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: leadership.handle_alter_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: leadership.handle_list_reassignments,
    ApiKey.FIND_COORDINATOR: groups.handle_find_coordinator,
    ApiKey.JOIN_GROUP: groups.handle_join_group,
    ApiKey.SYNC_GROUP: groups.handle_sync_group,
    ApiKey.HEARTBEAT: groups.handle_heartbeat,
    ApiKey.LEAVE_GROUP: groups.handle_leave_group,
    ApiKey.OFFSET_COMMIT: groups.handle_offset_commit,
    ApiKey.OFFSET_FETCH: groups.handle_offset_fetch,
    ApiKey.LIST_GROUPS: groups.handle_list_groups,
    ApiKey.DESCRIBE_GROUPS: groups.handle_describe_groups,
    ApiKey.DELETE_GROUPS: groups.handle_delete_groups,
    ApiKey.OFFSET_DELETE: groups.handle_offset_delete,
    ApiKey.SASL_HANDSHAKE: sasl.handle_sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: sasl.handle_sasl_authenticate,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: sasl.handle_describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: sasl.handle_alter_user_scram_credentials,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: quotas.handle_describe_client_quotas,
    ApiKey.ALTER_CLIENT_QUOTAS: quotas.handle_alter_client_quotas,
    ApiKey.CREATE_ACLS: acls.handle_create_acls,
    ApiKey.DESCRIBE_ACLS: acls.handle_describe_acls,
    ApiKey.DELETE_ACLS: acls.handle_delete_acls,
    ApiKey.ADD_PARTITIONS_TO_TXN: transactions.handle_add_partitions,
    ApiKey.ADD_OFFSETS_TO_TXN: transactions.handle_add_offsets,
    ApiKey.END_TXN: transactions.handle_end_txn,
    ApiKey.WRITE_TXN_MARKERS: transactions.handle_write_txn_markers,
    ApiKey.TXN_OFFSET_COMMIT: transactions.handle_txn_offset_commit,
    ApiKey.DESCRIBE_TRANSACTIONS: transactions.handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: transactions.handle_list_transactions,
    ApiKey.DESCRIBE_PRODUCERS: transactions.handle_describe_producers,
}
