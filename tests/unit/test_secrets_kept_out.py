"""Secrets never shown: the objects that hold a password, a private key or a SCRAM key
keep them out of their repr (a log line, a traceback, a debugger's print), and a SASL
exchange that fails never quotes what the client sent (a PLAIN token holds a password)."""

from __future__ import annotations

from typing import Any

import pytest

from partita.client.security import ClientSecurity
from partita.cluster.etcd_kv import EtcdSecurity
from partita.errors import SaslAuthenticationFailedError
from partita.security.scram import ScramServer, make_credential
from partita.security.tls import TlsSettings
from partita.spark.options import SinkOptions

SECRET = "hunter2-s3cret"


@pytest.mark.parametrize(
    "holder",
    [
        ClientSecurity("SASL_SSL", "PLAIN", "alice", SECRET),
        EtcdSecurity(key=SECRET.encode(), username="broker", password=SECRET),
        TlsSettings({"ssl.key.password": SECRET, "ssl.keystore.key": SECRET}),
        SinkOptions("127.0.0.1:9092", "t", security=(("sasl.password", SECRET),)),
    ],
    ids=lambda holder: type(holder).__name__,
)
def test_a_secret_is_not_in_the_repr(holder: Any) -> None:
    assert SECRET not in repr(holder) and SECRET.encode().hex() not in repr(holder)


def test_a_scram_credential_shows_no_key() -> None:
    credential = make_credential("SCRAM-SHA-256", SECRET)
    shown = repr(credential)
    assert credential.stored_key.hex() not in shown and repr(credential.stored_key) not in shown
    assert repr(credential.server_key) not in shown


def test_a_plain_token_sent_into_scram_is_not_quoted_back() -> None:
    server = ScramServer("SCRAM-SHA-256", lambda _m, _u: make_credential("SCRAM-SHA-256", "x"))
    with pytest.raises(SaslAuthenticationFailedError) as error:
        server.respond(f"n,,\x00alice\x00{SECRET}".encode())  # reaches the attributes
    assert SECRET not in str(error.value)
    assert "malformed SCRAM attribute" in str(error.value)  # refused where it is read
