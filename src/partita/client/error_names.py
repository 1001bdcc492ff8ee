"""Kafka's names and descriptions for its numeric error codes, for messages people read.

The table is kafka-python's (generated from Kafka's own list); it is loaded only when an
error is being reported, so that a client which never fails never pays for it.
"""

from __future__ import annotations


def describe_error_code(code: int) -> str:
    """``"does not exist (UNKNOWN_TOPIC_OR_PARTITION, Kafka error 3)"``-style text: Kafka's
    description when it has one, and always the name and the number to search for."""
    from kafka.errors import for_code  # noqa: PLC0415 - only on the error path

    error = for_code(code)
    name = getattr(error, "message", "UNKNOWN")
    description = (getattr(error, "description", "") or "").rstrip(".")
    if name == "UNKNOWN" or not description:
        return f"Kafka error {code}" if name == "UNKNOWN" else f"{name} (Kafka error {code})"
    return f"{description} ({name}, Kafka error {code})"


def error_code_name(code: int) -> str:
    """``"NOT_LEADER_FOR_PARTITION (6)"``: short enough for a log field."""
    from kafka.errors import for_code  # noqa: PLC0415 - only on the error path

    return f"{getattr(for_code(code), 'message', 'UNKNOWN')} ({code})"
