"""Spark Kafka source/sink options: parsed like Spark's connector, refused with its rules."""

from __future__ import annotations

import pytest

from partita.spark.options import (
    OptionError,
    parse_duration_ms,
    parse_sink_options,
    parse_source_options,
)

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_defaults_differ_between_batch_and_streaming() -> None:
    batch = parse_source_options({**BOOT, "subscribe": "a,b"}, streaming=False)
    stream = parse_source_options({**BOOT, "subscribe": "a,b"}, streaming=True)
    assert batch.starting == "earliest" and batch.ending == "latest"
    assert stream.starting == "latest"
    assert batch.subscription.topics == ("a", "b")
    assert batch.fail_on_data_loss and not batch.include_headers


def test_option_names_are_case_insensitive_and_partita_alias_works() -> None:
    options = parse_source_options(
        {"partita.bootstrap.servers": "h:1", "SubscribePattern": "ev.*", "INCLUDEHEADERS": "true"},
        streaming=False,
    )
    assert options.bootstrap_servers == "h:1"
    assert options.subscription.matches("events") and not options.subscription.matches("xev")
    assert options.include_headers


def test_per_partition_offsets_and_timestamps() -> None:
    options = parse_source_options(
        {
            **BOOT,
            "assign": '{"t":[0,1]}',
            "startingOffsets": '{"t":{"0":5,"1":-2}}',
            "endingOffsets": '{"t":{"0":-1,"1":9}}',
            "endingOffsetsByTimestamp": '{"t":{"0":1000}}',
        },
        streaming=False,
    )
    assert options.subscription.partitions == (("t", 0), ("t", 1))
    assert options.starting == {("t", 0): 5, ("t", 1): -2}
    assert options.ending == {("t", 0): -1, ("t", 1): 9}
    assert options.ending_timestamp == {("t", 0): 1000}
    # A global timestamp beats the per-partition JSON, as in Spark.
    both = parse_source_options(
        {
            **BOOT,
            "subscribe": "t",
            "startingTimestamp": "77",
            "startingOffsetsByTimestamp": '{"t":{"0":1}}',
        },
        streaming=True,
    )
    assert both.starting_timestamp == 77


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"subscribe": "t"}, False, "kafka.bootstrap.servers"),
        ({**BOOT}, False, "must be specified"),
        ({**BOOT, "subscribe": "t", "assign": '{"t":[0]}'}, False, "Only one of"),
        ({**BOOT, "subscribe": " , "}, False, "No topics"),
        ({**BOOT, "subscribePattern": "("}, False, "not a valid regex"),
        ({**BOOT, "assign": "[1,2]"}, False, "assign must be JSON"),
        ({**BOOT, "subscribe": "t", "startingOffsets": "latest"}, False, "can't be latest"),
        ({**BOOT, "subscribe": "t", "startingOffsets": '{"t":{"0":-1}}'}, False, "latest"),
        ({**BOOT, "subscribe": "t", "endingOffsets": "earliest"}, False, "can't be earliest"),
        ({**BOOT, "subscribe": "t", "endingOffsets": '{"t":{"0":-2}}'}, False, "earliest"),
        ({**BOOT, "subscribe": "t", "endingOffsets": "latest"}, True, "not valid in streaming"),
        ({**BOOT, "subscribe": "t", "maxOffsetsPerTrigger": "10"}, False, "only valid in stream"),
        ({**BOOT, "subscribe": "t", "maxOffsetsPerTrigger": "0"}, True, "must be >= 1"),
        ({**BOOT, "subscribe": "t", "maxOffsetsPerTrigger": "x"}, True, "must be an integer"),
        (
            {**BOOT, "subscribe": "t", "maxOffsetsPerTrigger": "5", "minOffsetsPerTrigger": "9"},
            True,
            "can't be greater",
        ),
        ({**BOOT, "subscribe": "t", "startingOffsets": "{bad"}, True, "startingoffsets must be"),
        (
            {**BOOT, "subscribe": "t", "kafka.auto.offset.reset": "earliest"},
            True,
            "startingOffsets",
        ),
        ({**BOOT, "subscribe": "t", "kafka.enable.auto.commit": "true"}, True, "not supported"),
        ({**BOOT, "subscribe": "t", "startingOfsets": "earliest"}, True, "Unknown option"),
        ({**BOOT, "subscribe": "t", "failOnDataLoss": "maybe"}, True, "true or false"),
        ({**BOOT, "subscribe": "t", "maxTriggerDelay": "soon"}, True, "duration"),
        (
            {**BOOT, "assign": '{"t":[0,1]}', "startingOffsets": '{"t":{"0":1}}'},
            False,
            "must be the same",
        ),
    ],
)
def test_refused(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_source_options(options, streaming=streaming)


def test_durations() -> None:
    assert parse_duration_ms("15m") == 900_000
    assert parse_duration_ms("30s") == 30_000
    assert parse_duration_ms("250") == 250
    assert parse_duration_ms("2h") == 7_200_000


def test_sink_options_map_producer_settings() -> None:
    sink = parse_sink_options(
        {
            **BOOT,
            "topic": "out",
            "kafka.acks": "1",
            "kafka.linger.ms": "20",
            "kafka.compression.type": "zstd",
        }
    )
    assert sink.topic == "out"
    assert sink.producer == {
        "acks": "1",
        "linger_ms": 20,
        "compression_type": "zstd",
        "batch_size": 1_000_000,
    }
    with pytest.raises(OptionError, match="not supported"):
        parse_sink_options({**BOOT, "kafka.value.serializer": "x"})
    with pytest.raises(OptionError, match="not supported by the partita sink"):
        parse_sink_options({**BOOT, "kafka.buffer.memory": "1"})
    with pytest.raises(OptionError, match="must be an integer"):
        parse_sink_options({**BOOT, "kafka.linger.ms": "soon"})


def test_the_source_reads_committed_only_when_asked() -> None:
    base = {**BOOT, "subscribe": "t"}
    assert parse_source_options(base, streaming=False).isolation == 0
    chosen = {**base, "kafka.isolation.level": "READ_COMMITTED"}
    assert parse_source_options(chosen, streaming=False).isolation == 1
    with pytest.raises(OptionError, match="read_uncommitted or read_committed"):
        parse_source_options({**base, "kafka.isolation.level": "serializable"}, streaming=False)


def test_the_sink_is_at_least_once_unless_asked() -> None:
    plain = parse_sink_options({**BOOT, "topic": "out"})
    assert not plain.exactly_once and plain.write_version is None
    once = parse_sink_options(
        {
            **BOOT,
            "topic": "out",
            "deliveryGuarantee": "exactly-once",
            "transactionalIdPrefix": "report",
            "writeVersion": "7",
            "kafka.transaction.timeout.ms": "300000",
        }
    )
    assert once.exactly_once
    assert (once.transactional_id_prefix, once.write_version) == ("report", 7)
    assert once.producer["transaction_timeout_ms"] == 300_000


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"deliveryGuarantee": "exactly-twice"}, "deliveryGuarantee must be"),
        ({"writeVersion": "1"}, "needs deliveryGuarantee=exactly-once"),
        ({"transactionalIdPrefix": "x"}, "needs deliveryGuarantee=exactly-once"),
        ({"deliveryGuarantee": "exactly-once", "writeVersion": "-1"}, "must be >= 0"),
        ({"deliveryGuarantee": "exactly-once", "kafka.acks": "1"}, "needs acks=all"),
        ({"deliveryGuarantee": "exactly-once", "transactionalIdPrefix": " "}, "not be empty"),
        ({"kafka.transactional.id": "mine"}, "each task needs"),
    ],
)
def test_exactly_once_refusals(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_sink_options({**BOOT, "topic": "out", **options})
