"""What the broker knows of a request besides its body: the header, who sent it and from
where. Every request reaches its handler with one (``server.dispatch``): the one seam an
authorizer checks, with the principal the connection authenticated as."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from partita.protocol.codec import RequestHeader
from partita.server.access import ALLOW_ALL, Access

if TYPE_CHECKING:
    from partita.server.authentication import Session


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """Kafka's principal: a type and a name, written ``User:alice``."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


# Who a connection is before (or without) authentication, as in Kafka.
ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")


@dataclass(frozen=True, slots=True)
class RequestContext:
    header: RequestHeader
    principal: KafkaPrincipal = ANONYMOUS
    client_host: str = ""
    session: Session | None = None  # the connection's authentication (SASL requests)
    access: Access = ALLOW_ALL  # what the principal may do (server/authorization.py)
    listener: str = "PLAINTEXT"  # the listener it came in on: Metadata answers with its addresses

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def client_id(self) -> str | None:
        return self.header.client_id


def fetch_replica_id(request: Any, version: int) -> int:
    """The fetching broker's id (a follower), or -1 for a consumer: in the request body
    up to v14, in ReplicaState from v15."""
    if version >= 15:
        state = getattr(request, "replica_state", None)
        return int(state.replica_id) if state is not None else -1
    return int(request.replica_id)
