"""How ``partita consume`` prints a record: a layout (``--format``) and a way of showing
bytes (``--encoding``).

Keys and values are bytes. ``text`` shows them as UTF-8, with U+FFFD where they are not;
``hex`` and ``base64`` show any bytes exactly, so binary records survive a pipe and can
be decoded back.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

FORMATS = ("text", "value", "json")
ENCODINGS = ("text", "hex", "base64")

Render = Callable[[bytes], str]


def _as_text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _as_base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


RENDERERS: dict[str, Render] = {"text": _as_text, "hex": bytes.hex, "base64": _as_base64}


def record_formatter(fmt: str, encoding: str) -> Callable[[Any], str]:
    """A function from a consumer record to the line printed for it."""
    render = RENDERERS[encoding]

    def as_json(record: Any) -> str:
        return json.dumps(
            {
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "timestamp": record.timestamp,
                "key": None if record.key is None else render(record.key),
                "value": None if record.value is None else render(record.value),
                "headers": {k: render(v or b"") for k, v in record.headers},
            }
        )

    def as_value(record: Any) -> str:
        return render(record.value or b"")

    def as_text(record: Any) -> str:
        key = "" if record.key is None else render(record.key)
        value = render(record.value or b"")
        return f"{record.partition}\t{record.offset}\t{record.timestamp}\t{key}\t{value}"

    return {"json": as_json, "value": as_value, "text": as_text}[fmt]
