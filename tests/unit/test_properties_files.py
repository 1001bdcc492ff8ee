"""Kafka's properties files (server/config.py read_properties), as the broker's
--config and every client command's --command-config read them."""

from __future__ import annotations

from pathlib import Path

import pytest

from partita.errors import InvalidConfigurationError
from partita.local.cluster import write_private_properties
from partita.server.config import parse_assignments, read_properties


def test_continued_lines_comments_and_both_separators(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "# a comment\n! another\nsecurity.protocol=SASL_SSL\nsasl.mechanism: PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule \\\n"
        '    required username="alice" \\\n    password="s3cret";\n'
    )
    assert read_properties(path) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
        'required username="alice" password="s3cret";',
    }


def test_errors_name_the_line_never_its_text(tmp_path: Path) -> None:
    path = tmp_path / "bad.properties"
    path.write_text("ok=1\nsasl.password s3cret\n")
    with pytest.raises(InvalidConfigurationError) as error:
        read_properties(path)
    assert str(error.value) == f"{path}:2: expected key=value"
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(InvalidConfigurationError, match="not UTF-8"):
        read_properties(path)
    for written in ("sasl.password s3cret", "sasl.password:s3cret", "sasl.password\ts3cret"):
        with pytest.raises(InvalidConfigurationError) as error:
            parse_assignments([written], "-X")
        assert "s3cret" not in str(error.value) and "-X" in str(error.value), written
        assert "'sasl.password'" in str(error.value)


def test_private_properties_are_owner_only_and_read_back_whole(tmp_path: Path) -> None:
    settings = {
        "listener.name.sasl_ssl.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="admin" password="a=b:c";'
        ),
        "ssl.key.password": "p@ss word",
    }
    path = write_private_properties(tmp_path / "broker.properties", settings)
    assert path.stat().st_mode & 0o777 == 0o600
    assert read_properties(path) == settings
    # A trailing backslash would make the reader swallow the next line: refused, named
    # by its key only.
    with pytest.raises(ValueError, match=r"^ssl\.key\.password: ") as error:
        write_private_properties(tmp_path / "bad.properties", {"ssl.key.password": "s3cret\\"})
    assert "s3cret" not in str(error.value)
