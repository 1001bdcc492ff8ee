"""Kafka's properties files (server/config.py read_properties), as the broker's
--config and every client command's --command-config read them."""

from __future__ import annotations

from pathlib import Path

import pytest

from partita.errors import InvalidConfigurationError
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
    with pytest.raises(InvalidConfigurationError) as error:
        parse_assignments(["sasl.password s3cret"], "-X")
    assert "s3cret" not in str(error.value) and "-X" in str(error.value)
