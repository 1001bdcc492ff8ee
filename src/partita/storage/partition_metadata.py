"""Kafka's ``partition.metadata``: the id of the topic a partition directory belongs to.

Directory names carry only the topic's name, and a name comes back when a topic is
deleted and created again. A broker that was down meanwhile never saw the deletion; on
its return, its old directory must not pass for a replica of the new topic (its records
would sit at offsets the new leader gave to others, and the follower's truncation rule
cannot tell them apart, both being epoch 0). Kafka records the topic id in each
directory (KIP-516) and treats a directory whose id is not the topic's as stray; so does
partita. The file is Kafka's: ``version: 0`` and ``topic_id:`` in Kafka's Uuid text form.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from pathlib import Path

from partita.storage.checkpoint import make_durable, write_atomically

PARTITION_METADATA = "partition.metadata"


def kafka_uuid_text(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def read_topic_id(directory: Path) -> uuid.UUID | None:
    """The topic id recorded in ``directory``; None when none is (a directory written
    before ids were recorded) or the file cannot be read as one."""
    try:
        text = (directory / PARTITION_METADATA).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "topic_id":
            raw = value.strip()
            try:
                return uuid.UUID(bytes=base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
            except (ValueError, binascii.Error):
                return None
    return None


def write_topic_id(directory: Path, topic_id: uuid.UUID) -> None:
    """Record ``topic_id``: written and renamed but not fsynced (``sync_topic_id`` does
    that later): a crash before then leaves no file or an empty one, which reads as no
    id recorded, and the directory is adopted again."""
    write_atomically(
        directory / PARTITION_METADATA,
        f"version: 0\ntopic_id: {kafka_uuid_text(topic_id)}\n",
        durable=False,
    )


def sync_topic_id(directory: Path) -> None:
    """Make a ``write_topic_id`` durable."""
    make_durable(directory / PARTITION_METADATA)
