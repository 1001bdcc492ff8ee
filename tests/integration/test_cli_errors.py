"""The CLI as a new user meets it (issue 22): one-line errors naming what is wrong, kcat's
negative offsets, binary records, piped tables, the global -b and help that reads well.
Every test runs the real ``partita`` process against a real broker."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.integration.conftest import BrokerProcess

PARTITA = [sys.executable, "-m", "partita.cli.main"]
# No COLUMNS and no PARTITA_* from the caller; PYTHONPATH kept, so that the tests can run
# another copy of the code (the code before a fix, to see them fail).
PATH_ONLY = {"PATH": "/usr/bin:/bin"} | (
    {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}
)


def partita(
    *args: str, stdin: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the CLI exactly with ``args`` (pass -b where the test wants it)."""
    done = subprocess.run(
        [*PARTITA, *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
        env=env or PATH_ONLY,
    )
    return subprocess.CompletedProcess(
        done.args,
        done.returncode,
        done.stdout.decode("utf-8", "replace"),
        done.stderr.decode("utf-8", "replace"),
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The single line a failed command printed, checked to be just that."""
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), result.stderr
    for python_name in ("Error:", "Exception", "Traceback", "KeyError"):
        assert python_name not in lines[0], lines[0]
    return lines[0]


def create(broker: BrokerProcess, topic: str, partitions: int = 1, *configs: str) -> None:
    extra = [arg for config in configs for arg in ("-c", config)]
    done = partita("topic", "create", topic, "-p", str(partitions), *extra, "-b", broker.bootstrap)
    assert done.returncode == 0, done.stderr


def produce(broker: BrokerProcess, topic: str, data: bytes, *args: str) -> None:
    done = partita("produce", topic, *args, "-b", broker.bootstrap, stdin=data)
    assert done.returncode == 0, done.stderr


def test_consume_of_a_missing_partition_names_it(broker: BrokerProcess) -> None:
    create(broker, "two", 2)
    error = one_line_error(partita("consume", "two", "-p", "9", "-b", broker.bootstrap))
    assert "topic 'two' has no partition 9" in error


def test_a_malformed_bootstrap_address_is_named(broker: BrokerProcess) -> None:
    after = one_line_error(partita("consume", "any", "-b", "notanaddress"))
    assert "'notanaddress' is not HOST:PORT" in after
    before = one_line_error(partita("-b", "notanaddress", "topic", "list"))
    assert "'notanaddress' is not HOST:PORT" in before


def test_describing_a_missing_topic_says_it_does_not_exist(broker: BrokerProcess) -> None:
    error = one_line_error(partita("topic", "describe", "nosuch", "-b", broker.bootstrap))
    assert error == "error: topic 'nosuch' does not exist"


def test_producing_to_an_invalid_topic_name_says_why(broker: BrokerProcess) -> None:
    done = partita("produce", "bad name!", "-b", broker.bootstrap, stdin=b"x\n")
    error = one_line_error(done)
    assert "'bad name!'" in error
    assert "characters other than ASCII alphanumerics, '.', '_', '-'" in error


def test_describing_a_missing_group_fails_as_kafkas_tool_does(broker: BrokerProcess) -> None:
    error = one_line_error(partita("group", "describe", "nosuchgroup", "-b", broker.bootstrap))
    assert error == "error: Consumer group 'nosuchgroup' does not exist."


def test_negative_offsets_count_back_from_the_end_as_kcat(broker: BrokerProcess) -> None:
    create(broker, "tail")
    produce(broker, "tail", b"".join(b"%d\n" % i for i in range(10)))

    def values(*args: str) -> list[str]:
        done = partita("consume", "tail", "--format", "value", *args, "-b", broker.bootstrap)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    assert values("-o", "-1") == ["9"]
    assert values("--offset", "-3") == ["7", "8", "9"]
    assert values("-o", "-100") == [str(i) for i in range(10)]  # never before the start
    assert values("-o", "4", "-n", "2") == ["4", "5"]
    refused = partita("consume", "tail", "-g", "readers", "-o", "-1", "-b", broker.bootstrap)
    assert "--offset can only be beginning or end" in one_line_error(refused)


def test_binary_input_is_produced_as_bytes_and_consumed_exactly(broker: BrokerProcess) -> None:
    create(broker, "bin")
    lines = [b"plain", b"\xff\xfe:\x00\x01\x80", b"caf\xc3\xa9:\xe9t\xe9"]
    produce(broker, "bin", b"".join(line + b"\n" for line in lines), "--key-sep", ":")
    expected = [(None, b"plain"), (b"\xff\xfe", b"\x00\x01\x80"), (b"caf\xc3\xa9", b"\xe9t\xe9")]

    done = partita(
        "consume", "bin", "--format", "json", "--encoding", "base64", "-b", broker.bootstrap
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    got = [
        (None if r["key"] is None else base64.b64decode(r["key"]), base64.b64decode(r["value"]))
        for r in records
    ]
    assert got == expected

    hexed = partita("consume", "bin", "--encoding", "hex", "-b", broker.bootstrap)
    assert hexed.returncode == 0, hexed.stderr
    keys_and_values = [line.split("\t")[3:] for line in hexed.stdout.splitlines()]
    assert keys_and_values == [[(k or b"").hex(), v.hex()] for k, v in expected]


def test_piped_tables_keep_every_value_whole(broker: BrokerProcess) -> None:
    long_name = "a-topic-name-" + "x" * 180 + "-end"
    create(broker, long_name, 1, "retention.ms=" + "9" * 15)
    listed = partita("topic", "list", "-b", broker.bootstrap)  # stdout is a pipe here
    assert listed.returncode == 0, listed.stderr
    assert long_name in listed.stdout
    row = next(line for line in listed.stdout.splitlines() if long_name in line)
    assert "1" in row.split(long_name)[1]  # its partition count, on the same line
    described = partita("topic", "describe", long_name, "-b", broker.bootstrap)
    assert described.returncode == 0, described.stderr
    assert "9" * 15 in described.stdout
    assert "…" not in listed.stdout + described.stdout


def test_bootstrap_may_come_before_the_command(broker: BrokerProcess) -> None:
    create(broker, "anywhere")
    before = partita("-b", broker.bootstrap, "topic", "list")
    assert before.returncode == 0, before.stderr
    assert "anywhere" in before.stdout
    # The -b after the command wins over the one before it.
    both = partita("-b", "127.0.0.1:1", "topic", "list", "-b", broker.bootstrap)
    assert both.returncode == 0, both.stderr
    assert "anywhere" in both.stdout
    from_env = partita("topic", "list", env={**PATH_ONLY, "PARTITA_BOOTSTRAP": broker.bootstrap})
    assert from_env.returncode == 0, from_env.stderr
    assert "anywhere" in from_env.stdout


def test_help_keeps_sentences_whole_and_shows_no_sentinel_defaults() -> None:
    wide = {**PATH_ONLY, "COLUMNS": "200"}
    broker_help = partita("broker", "--help", env=wide)
    assert broker_help.returncode == 0, broker_help.stderr
    # Wide enough for the whole paragraph: no break inside it.
    assert (
        "Settings use Kafka's names and defaults; --set wins over --config. SIGTERM or "
        "Ctrl-C stops the broker cleanly" in broker_help.stdout
    )
    create_help = partita("topic", "create", "--help", env=wide)
    assert create_help.returncode == 0, create_help.stderr
    assert "num.partitions" in create_help.stdout
    assert "[default: -1]" not in create_help.stdout


def test_a_malformed_spark_setting_is_named_without_its_value(tmp_path: Path) -> None:
    # A --spark-conf missing its '=' may hold a password: the error names the key only,
    # before anything is started or wiped.
    done = partita(
        "pipeline", "--work-dir", str(tmp_path / "w"), "--spark-conf",
        "spark.ssl.keyPassword hunter2",
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "error: --spark-conf expects key=value, got 'spark.ssl.keyPassword'..."
    )
    assert not (tmp_path / "w").exists()
