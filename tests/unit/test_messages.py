"""The handler boundary is typed: each API's handler reads the typed view of its own
request (``protocol.messages``, generated from Kafka's schemas), and the generated file is
what the generator writes today."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path
from types import ModuleType

from partita.protocol import messages
from partita.protocol.api import SUPPORTED
from partita.server.dispatch import HANDLERS

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "generate_messages", ROOT / "scripts" / "generate_messages.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_views_are_up_to_date() -> None:
    written = (ROOT / "src" / "partita" / "protocol" / "messages.py").read_text()
    assert _generator().render() == written, "run scripts/generate_messages.py"


def test_every_supported_api_has_a_handler_typed_with_its_request_view() -> None:
    assert set(HANDLERS) == set(SUPPORTED)
    for key, handler in HANDLERS.items():
        view = SUPPORTED[key].request._json["name"]
        expected = "ProduceRequestBody" if view == "ProduceRequest" else view
        params = list(inspect.signature(handler).parameters.values())
        assert [p.annotation for p in params[:2]] == ["Broker", "RequestContext"], handler
        assert params[2].annotation == expected, f"{key.name}: {params[2].annotation}"
        if view != "ProduceRequest":  # produce has its own in-place decoder
            assert hasattr(messages, view)


def test_a_view_names_the_fields_of_its_schema() -> None:
    fields = messages.FetchRequestFetchPartition.__annotations__
    assert fields["fetch_offset"] == "int"
    assert fields["last_fetched_epoch"] == "int"
    assert messages.MetadataRequest.__annotations__["topics"].endswith("| None")
