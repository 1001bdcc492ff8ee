"""ApiVersions: which APIs and versions this broker speaks."""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata import ApiVersionsResponse

from partita.errors import UnsupportedVersionError
from partita.protocol.api import SUPPORTED
from partita.protocol.messages import ApiVersionsRequest
from partita.server.broker import Broker
from partita.server.request_context import RequestContext


def _api_keys() -> list[Any]:
    return [
        ApiVersionsResponse.ApiVersion(
            api_key=key, min_version=spec.min_version, max_version=spec.max_version
        )
        for key, spec in sorted(SUPPORTED.items())
    ]


def _response(error_code: int) -> Any:
    return ApiVersionsResponse(
        error_code=error_code,
        api_keys=_api_keys(),
        throttle_time_ms=0,
        supported_features=[],
        finalized_features_epoch=-1,
        finalized_features=[],
        zk_migration_ready=False,
    )


def handle(_broker: Broker, _context: RequestContext, _request: ApiVersionsRequest) -> Any:
    return _response(0)


def unsupported_version_body() -> bytes:
    """The v0-layout answer to an ApiVersions request of a version we do not know,
    so that the client can retry with one we do (KIP-511)."""
    return bytes(_response(UnsupportedVersionError.code).encode(version=0))
