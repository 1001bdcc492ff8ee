"""The server side of SASL PLAIN and SCRAM, sans-IO, against RFC 7677's test vector and a
real client implementation (kafka-python's SCRAM client, which checks our signature).

- A right password logs in; the client verifies the server's signature.
- A wrong password, an unknown user, another nonce, channel binding, an authorization id
  other than the user, a replayed final message: SASL_AUTHENTICATION_FAILED.
- Any bytes at all: an answer or SASL_AUTHENTICATION_FAILED, never another exception.
- Credentials keep no password: only salt, iterations, stored key and server key.
"""

from __future__ import annotations

import base64
import itertools

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from kafka.net.sasl.scram import ScramClient

from partita.errors import (
    KafkaError,
    SaslAuthenticationFailedError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from partita.security.plain import PlainServer
from partita.security.scram import (
    CredentialLookup,
    ScramCredential,
    ScramServer,
    make_credential,
)
from partita.security.scram import ScramClient as OurScramClient
from partita.server.authentication import ListenerSecurity, Session
from partita.server.handlers.sasl import upserted_credential

MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]


def _lookup(users: dict[str, ScramCredential]) -> CredentialLookup:
    return lambda _mechanism, user: users.get(user)


def test_rfc_7677_test_vector() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = make_credential("SCRAM-SHA-256", "pencil", salt=salt)
    server = ScramServer(
        "SCRAM-SHA-256",
        _lookup({"user": credential}),
        nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    )
    first = server.respond(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = server.respond(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.username == "user"


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_real_client_logs_in_and_checks_our_signature(mechanism: str) -> None:
    users = {"alice": make_credential(mechanism, "s3cret, with = signs", iterations=4096)}
    server = ScramServer(mechanism, _lookup(users))
    client = ScramClient("alice", "s3cret, with = signs", mechanism)
    client.process_server_first_message(server.respond(client.first_message()))
    client.process_server_final_message(server.respond(client.final_message()))  # checks v=
    assert server.complete and server.username == "alice"


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_wrong_password_fails_and_ends_the_exchange(mechanism: str) -> None:
    server = ScramServer(mechanism, _lookup({"alice": make_credential(mechanism, "right")}))
    client = ScramClient("alice", "wrong", mechanism)
    client.process_server_first_message(server.respond(client.first_message()))
    with pytest.raises(SaslAuthenticationFailedError, match="Invalid client credentials"):
        server.respond(client.final_message())
    assert not server.complete
    with pytest.raises(SaslAuthenticationFailedError):
        server.respond(client.final_message())  # nothing more after a failure


def test_an_unknown_user_and_a_credential_of_another_mechanism_fail() -> None:
    users = {"alice": make_credential("SCRAM-SHA-512", "pw")}
    with pytest.raises(SaslAuthenticationFailedError, match="Invalid user credentials"):
        ScramServer("SCRAM-SHA-256", _lookup(users)).respond(b"n,,n=alice,r=abc")
    with pytest.raises(SaslAuthenticationFailedError, match="Invalid user credentials"):
        ScramServer("SCRAM-SHA-512", _lookup(users)).respond(b"n,,n=bob,r=abc")


def test_nonce_binding_authzid_and_replay_are_checked() -> None:
    users = {"a,b=c": make_credential("SCRAM-SHA-256", "pw")}
    with pytest.raises(SaslAuthenticationFailedError, match="channel binding"):
        ScramServer("SCRAM-SHA-256", _lookup(users)).respond(b"p=tls-unique,,n=a=2Cb=3Dc,r=x")
    with pytest.raises(SaslAuthenticationFailedError, match="authorization id"):
        ScramServer("SCRAM-SHA-256", _lookup(users)).respond(b"n,a=mallory,n=a=2Cb=3Dc,r=x")
    server = ScramServer("SCRAM-SHA-256", _lookup(users), nonce=lambda: "SERVER")
    server.respond(b"n,a=a=2Cb=3Dc,n=a=2Cb=3Dc,r=client")  # the escaped name, and as authzid
    header = base64.b64encode(b"n,a=a=2Cb=3Dc,")
    with pytest.raises(SaslAuthenticationFailedError, match="nonce"):
        server.respond(b"c=" + header + b",r=clientOTHER,p=AAAA")

    client = ScramClient("a,b=c", "pw", "SCRAM-SHA-256")
    client.user = b"a=2Cb=3Dc"  # kafka-python does not escape; the wire form must be
    server = ScramServer("SCRAM-SHA-256", _lookup(users))
    client.process_server_first_message(server.respond(client.first_message()))
    final = client.final_message()
    server.respond(final)
    assert server.username == "a,b=c"
    with pytest.raises(SaslAuthenticationFailedError, match="over"):
        server.respond(final)  # a replayed final message


@given(st.binary(max_size=300), st.binary(max_size=300))
def test_any_bytes_are_answered_or_refused_never_a_crash(first: bytes, second: bytes) -> None:
    users = {"alice": make_credential("SCRAM-SHA-256", "pw")}
    server = ScramServer("SCRAM-SHA-256", _lookup(users))
    try:
        server.respond(b"n,,n=alice,r=nonce" if first[:1] == b"\0" else first)
        server.respond(second)
    except SaslAuthenticationFailedError:
        pass
    assert not server.complete


def test_a_credential_holds_no_password() -> None:
    credential = make_credential("SCRAM-SHA-512", "hunter2", iterations=8192)
    assert credential.iterations == 8192 and len(credential.salt) == 32
    assert b"hunter2" not in repr(credential).encode()
    with pytest.raises(ValueError):
        make_credential("SCRAM-SHA-256", "pw", iterations=100)  # below Kafka's 4096


def test_plain() -> None:
    def check(user: str, password: str) -> bool:
        return (user, password) == ("alice", "pw")

    server = PlainServer(check)
    assert server.respond(b"\0alice\0pw") == b"" and server.username == "alice"
    assert PlainServer(check).respond(b"alice\0alice\0pw") == b""
    for bad, reason in [
        (b"\0alice\0nope", "Invalid username or password"),
        (b"bob\0alice\0pw", "different from username"),
        (b"alice\0pw", "expected 3 tokens"),
        (b"\0\0pw", "username not specified"),
        (b"\xff\0alice\0pw", "expected 3 tokens"),
    ]:
        with pytest.raises(SaslAuthenticationFailedError, match=reason):
            PlainServer(check).respond(bad)
    with pytest.raises(SaslAuthenticationFailedError, match="over"):
        server.respond(b"\0alice\0pw")


def test_an_upsertion_is_checked_as_kafka_checks_it() -> None:
    good = upserted_credential("u", 1, 4096, b"salt", b"s" * 32)
    assert good.mechanism == "SCRAM-SHA-256" and good.iterations == 4096
    with pytest.raises(UnacceptableCredentialError, match="iterations"):
        upserted_credential("u", 1, 100, b"salt", b"s" * 32)
    with pytest.raises(UnacceptableCredentialError, match="128 bytes"):
        upserted_credential(
            "u", 2, 4096, b"s" * 129, b"s" * 64
        )  # the layout would not read it back
    with pytest.raises(UnacceptableCredentialError, match="empty"):
        upserted_credential("", 2, 4096, b"salt", b"s" * 64)
    with pytest.raises(UnsupportedSaslMechanismError):
        upserted_credential("u", 9, 4096, b"salt", b"s" * 64)


# -- partita's SCRAM client (client/connection.py logs in with it) ---------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_our_client_logs_in_to_our_server_and_checks_its_signature(mechanism: str) -> None:
    users = {"carol": make_credential(mechanism, "s3cret")}
    server = ScramServer(mechanism, _lookup(users))
    client = OurScramClient(mechanism, "carol", "s3cret")
    client.verify(server.respond(client.final(server.respond(client.first()))))
    assert server.username == "carol"
    # A server that does not know the password cannot forge the signature.
    impostor = ScramServer(mechanism, _lookup({"carol": make_credential(mechanism, "guess")}))
    client = OurScramClient(mechanism, "carol", "s3cret")
    final = client.final(impostor.respond(client.first()))
    with pytest.raises(SaslAuthenticationFailedError):
        impostor.respond(final)  # the impostor's own check fails first...
    with pytest.raises(SaslAuthenticationFailedError, match="signature"):
        client.verify(b"v=" + base64.b64encode(b"\0" * 64))  # ...and a made-up one too


@given(st.binary(max_size=300), st.binary(max_size=300))
def test_our_client_refuses_any_server_bytes_cleanly(first: bytes, final: bytes) -> None:
    """What a hostile broker sends the client (or the inter-broker login) fails with
    SASL_AUTHENTICATION_FAILED, never another exception (the SASL exchange's fuzzing)."""
    client = OurScramClient("SCRAM-SHA-256", "carol", "pw", nonce=lambda: "fixed")
    client.first()
    try:
        client.final(first)
        client.verify(final)
    except SaslAuthenticationFailedError:
        return
    raise AssertionError("random bytes were accepted as a server's proof")


RIGHT = b"\0alice\0alice-pw"
_TOKENS = st.one_of(
    st.sampled_from([RIGHT, b"\0alice\0wrong", b"\0bob\0alice-pw", b"alice-pw", b""]),
    st.binary(max_size=200),
)
_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["handshake", "token"]),
        st.one_of(st.sampled_from(["PLAIN", "SCRAM-SHA-256", "GSSAPI", ""]), st.text()),
        _TOKENS,
    ),
    max_size=6,
)


@given(_STEPS)
@example([("handshake", "PLAIN", b""), ("token", "", RIGHT)])
@example([("handshake", "PLAIN", b""), ("token", "", RIGHT), ("handshake", "PLAIN", b"")])
@example([("handshake", "PLAIN", b""), ("token", "", b"\0alice\0wrong"), ("token", "", RIGHT)])
@example([("handshake", "SCRAM-SHA-256", b""), ("token", "", RIGHT)])
def test_a_session_survives_any_sequence_of_sasl_requests(
    steps: list[tuple[str, str, bytes]],
) -> None:
    """A connection's Session (server/authentication.py) under any order of handshakes and
    tokens: each step answers or raises a Kafka error, which ends the connection (the
    broker closes it), and the session is logged in exactly when a PLAIN handshake was
    followed by alice's right password before anything failed."""
    security = ListenerSecurity(
        "SASL_PLAINTEXT",
        "SASL_PLAINTEXT",
        _NoStore(),  # type: ignore[arg-type]
        mechanisms=("PLAIN", "SCRAM-SHA-256"),
        plain_users={"alice": "alice-pw"},
    )
    session = Session(security)
    served: list[tuple[str, str, bytes]] = []
    for kind, mechanism, token in steps:
        try:
            if kind == "handshake":
                session.handshake(mechanism)
            else:
                session.authenticate(token)
        except KafkaError:
            break  # the connection closes here
        served.append((kind, mechanism, token))
    logged_in = any(
        first[:2] == ("handshake", "PLAIN") and second[0] == "token" and second[2] == RIGHT
        for first, second in itertools.pairwise(served)
    )
    assert session.authenticated == logged_in, served
    if logged_in:
        assert str(session.principal) == "User:alice"


class _NoStore:
    def scram_credential(self, _mechanism: str, _user: str) -> None:
        return None
