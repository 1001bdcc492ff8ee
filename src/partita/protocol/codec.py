"""Decoding request frames and encoding response frames.

The request header is parsed by hand (kafka-python's own header decoding copies the whole
frame); the body is decoded with kafka-python's compiled decoder for the exact version,
except a ProduceRequest's, which ``produce_request_body`` decodes leaving its record sets
in the frame.
A body that runs past the end of the frame is malformed: kafka-python does not notice a
``bytes`` field cut short, so we check the end offset ourselves.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from partita.protocol.api import SUPPORTED, ApiKey, ApiSpec
from partita.protocol.produce_request_body import decode_produce_request
from partita.protocol.wire import MalformedRequestError, skip_tagged_fields

_HEADER = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")
_RESPONSE_PREFIX = struct.Struct(">ii")  # frame size, correlation id


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


class UnsupportedRequestError(Exception):
    """Unknown API key or a version partita does not implement."""

    def __init__(self, header: RequestHeader, spec: ApiSpec | None) -> None:
        name = ApiKey(header.api_key).name if spec else f"api key {header.api_key}"
        super().__init__(f"unsupported request: {name} v{header.api_version}")
        self.header = header
        self.spec = spec


def decode_header(frame: bytes | memoryview) -> tuple[RequestHeader, int]:
    """The request header v1 fields and the position after them."""
    if len(frame) < 10:
        raise MalformedRequestError(f"request frame of {len(frame)} bytes has no header")
    api_key, version, correlation_id = _HEADER.unpack_from(frame, 0)
    (length,) = _INT16.unpack_from(frame, 8)
    pos = 10
    client_id = None
    if length >= 0:
        if pos + length > len(frame):
            raise MalformedRequestError("client id runs past the end of the frame")
        try:
            client_id = str(frame[pos : pos + length], "utf-8")
        except UnicodeDecodeError:
            raise MalformedRequestError("client id is not UTF-8") from None
        pos += length
    return RequestHeader(api_key, version, correlation_id, client_id), pos


def decode_request(frame: bytes | memoryview) -> tuple[RequestHeader, ApiSpec, Any]:
    """Header, API spec and decoded body of a request frame (without the size prefix)."""
    header, pos = decode_header(frame)
    spec = SUPPORTED.get(header.api_key)
    if spec is None or not spec.supports(header.api_version):
        raise UnsupportedRequestError(header, spec)
    flexible = spec.flexible(header.api_version)
    view = memoryview(frame)
    if flexible:  # request header v2: skip its tagged fields
        pos = skip_tagged_fields(view, pos)
    if header.api_key == ApiKey.PRODUCE:
        return header, spec, decode_produce_request(view, pos, header.api_version)
    decode = spec.request._struct.compiled_decode_from(
        header.api_version, compact=flexible, tagged=flexible, data_class=spec.request[None]
    )
    try:
        body, end = decode(view, pos)
    except Exception as exc:  # kafka-python raises struct.error, IndexError, ValueError, …
        raise MalformedRequestError(
            f"cannot decode {spec.key.name} v{header.api_version}: {type(exc).__name__}: {exc}"
        ) from exc
    if end > len(frame):
        raise MalformedRequestError(
            f"{spec.key.name} v{header.api_version} body needs {end} bytes, frame has {len(frame)}"
        )
    # Bytes after the body are ignored, as Kafka ignores them: librdkafka 2.16 sends
    # Metadata v12 requests with three of them.
    missing = _null_violation(_checked_fields(spec, header.api_version), body)
    if missing is not None:
        raise MalformedRequestError(
            f"{spec.key.name} v{header.api_version}: {missing} is null but may not be"
        )
    return header, spec, body


def encode_response(header: RequestHeader, spec: ApiSpec, response: Any) -> bytes:
    """A response frame: size, correlation id, header tagged fields (v1), body."""
    body = response.encode(version=header.api_version)
    # ApiVersions responses always use header v0 so that any client can read them.
    tagged = spec.flexible(header.api_version) and spec.key != ApiKey.API_VERSIONS
    prefix_len = 4 + (1 if tagged else 0)
    out = bytearray(_RESPONSE_PREFIX.pack(prefix_len + len(body), header.correlation_id))
    if tagged:
        out.append(0)
    out += body
    return bytes(out)


def encode_raw_response(correlation_id: int, body: bytes, *, header_tagged: bool) -> bytes:
    prefix_len = 4 + (1 if header_tagged else 0)
    out = bytearray(_RESPONSE_PREFIX.pack(prefix_len + len(body), correlation_id))
    if header_tagged:
        out.append(0)
    out += body
    return bytes(out)


_CheckedField = tuple[str, bool, tuple[Any, ...] | None, bool]
_FIELD_CACHE: dict[tuple[int, int], tuple[_CheckedField, ...]] = {}


def _checked_fields(spec: ApiSpec, version: int) -> tuple[_CheckedField, ...]:
    """Per API version, once: (name, may be null, sub-fields, is an array) for each field
    present in that version, so the per-request check is a plain walk."""
    key = (int(spec.key), version)
    cached = _FIELD_CACHE.get(key)
    if cached is None:
        cached = _compile_fields(spec.request._struct._fields, version)
        _FIELD_CACHE[key] = cached
    return cached


def _compile_fields(fields: Any, version: int) -> tuple[_CheckedField, ...]:
    out: list[_CheckedField] = []
    for f in fields:
        if not f.for_version_q(version) or f.tagged_field_q(version):
            continue
        # kafka-python reads the all-zero UUID as None; on the wire it is 16 bytes.
        nullable = bool(f.nullable_for_version_q(version)) or f.type_str == "uuid"
        nested = None
        if f.is_struct_array() or f.is_struct():
            nested = _compile_fields(f._fields, version)
        out.append((str(f.name), nullable, nested, bool(f.is_struct_array())))
    return tuple(out)


def _null_violation(fields: tuple[_CheckedField, ...], obj: Any) -> str | None:
    """The first field holding null where the schema forbids it (kafka-python's decoder
    accepts a -1 length anywhere; Kafka's refuses it)."""
    for name, nullable, nested, is_array in fields:
        value = getattr(obj, name, None)
        if value is None:
            if not nullable:
                return name
            continue
        if nested:
            for item in value if is_array else (value,):
                found = _null_violation(nested, item)
                if found is not None:
                    return f"{name}.{found}"
    return None
