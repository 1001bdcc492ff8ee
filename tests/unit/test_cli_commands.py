"""The lazily loaded command table of ``partita``: what ``--help`` lists without importing
a command is what the command itself says, and importing the CLI loads no command."""

from __future__ import annotations

import subprocess
import sys

import pytest

from partita.cli.main import COMMANDS, load_command, reflow


@pytest.mark.parametrize("name", list(COMMANDS))
def test_listed_summary_is_the_commands_own_first_line(name: str) -> None:
    command = load_command(name)
    assert command.name == name
    first_paragraph = (command.help or "").split("\n\n")[0]
    assert COMMANDS[name].summary == first_paragraph


def test_reflow_joins_lines_of_a_paragraph_and_keeps_indented_blocks() -> None:
    text = """Run it.

    Settings use
    Kafka's names.

    Example:
        partita broker
        --data-dir x
    """
    assert reflow(text) == (
        "Run it.\n\nSettings use Kafka's names.\n\nExample:\n    partita broker\n    --data-dir x"
    )


def test_importing_the_cli_loads_no_command() -> None:
    probe = (
        "import sys, partita.cli.main\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('partita.', 'numba', "
        "'pyarrow', 'kafka', 'aiokafka', 'structlog', 'rich', 'numpy')))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert set(loaded) <= {
        "partita.cli",
        "partita.cli.common",
        "partita.cli.main",
        "partita.client",
        "partita.client.bootstrap",
    }, loaded
