"""SaslHandshake and SaslAuthenticate: a connection's login, on the connection's session
(``server/authentication.py``); and DescribeUserScramCredentials /
AlterUserScramCredentials, the SCRAM users kept in the cluster's metadata."""

from __future__ import annotations

import hashlib
import hmac
from collections import Counter
from typing import Any

from kafka.protocol.admin import (
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsResponse,
)
from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from partita.errors import (
    DuplicateResourceError,
    IllegalSaslStateError,
    KafkaError,
    ResourceNotFoundError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from partita.protocol.messages import (
    AlterUserScramCredentialsRequest,
    DescribeUserScramCredentialsRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from partita.security.scram import HASHES, MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential
from partita.server.broker import Broker
from partita.server.request_context import RequestContext

MAX_SALT_BYTES = 128  # what the metadata layout accepts
# Kafka's ScramMechanism type ids on the wire.
MECHANISM_IDS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_TYPES = {name: number for number, name in MECHANISM_IDS.items()}


def handle_sasl_handshake(
    _broker: Broker, context: RequestContext, request: SaslHandshakeRequest
) -> Any:
    session = context.session
    enabled = list(session.security.mechanisms) if session is not None else []
    try:
        if session is None:
            raise IllegalSaslStateError("no session")
        session.handshake(request.mechanism)
        session.raw_tokens = context.api_version == 0  # v0: bare tokens follow
        code = 0
    except KafkaError as exc:
        code = exc.code
    return SaslHandshakeResponse(error_code=code, mechanisms=enabled)


def handle_sasl_authenticate(
    _broker: Broker, context: RequestContext, request: SaslAuthenticateRequest
) -> Any:
    session = context.session
    try:
        if session is None:
            raise IllegalSaslStateError("no session")
        answer = session.authenticate(bytes(request.auth_bytes))
        lifetime = session.session_lifetime_ms()
        code, message = 0, None
    except KafkaError as exc:
        answer, lifetime, code, message = b"", 0, exc.code, exc.message
    return SaslAuthenticateResponse(
        error_code=code, error_message=message, auth_bytes=answer, session_lifetime_ms=lifetime
    )


_Described = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
_Info = _Described.CredentialInfo


def handle_describe_user_scram_credentials(
    broker: Broker, _context: RequestContext, request: DescribeUserScramCredentialsRequest
) -> Any:
    users = broker.store.scram_users()
    wanted = [u.name for u in request.users] if request.users else sorted(users)
    asked = Counter(wanted)
    results = []
    for user in dict.fromkeys(wanted):  # each user once, in the order asked
        credentials = users.get(user, [])
        if asked[user] > 1:
            code, message = DuplicateResourceError.code, f"user {user!r} asked for twice"
        elif not credentials:
            code, message = (
                ResourceNotFoundError.code,
                f"Attempt to describe a user credential that does not exist: {user}",
            )
        else:
            code, message = 0, None
        infos = [
            _Info(mechanism=MECHANISM_TYPES[c.mechanism], iterations=c.iterations)
            for c in credentials
        ]
        results.append(
            _Described(user=user, error_code=code, error_message=message, credential_infos=infos)
        )
    return DescribeUserScramCredentialsResponse(
        throttle_time_ms=0, error_code=0, error_message=None, results=results
    )


_Altered = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult


def upserted_credential(
    user: str, mechanism: int, iterations: int, salt: bytes, salted: bytes
) -> ScramCredential:
    """A credential from what Kafka's admin client sends: the salted password
    ``Hi(password, salt, i)``, never the password itself."""
    name = MECHANISM_IDS.get(mechanism)
    if name is None:
        raise UnsupportedSaslMechanismError(f"unknown SCRAM mechanism {mechanism}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise UnacceptableCredentialError(
            f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}"
        )
    if not user:
        raise UnacceptableCredentialError("Username must not be empty")
    if not 0 < len(salt) <= MAX_SALT_BYTES or not 0 < len(salted) <= MAX_SALT_BYTES:
        raise UnacceptableCredentialError(
            f"salt and salted password must be 1 to {MAX_SALT_BYTES} bytes"
        )
    hash_name = HASHES[name]
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    return ScramCredential(
        name,
        salt,
        iterations,
        hashlib.new(hash_name, client_key).digest(),
        hmac.new(salted, b"Server Key", hash_name).digest(),
    )


async def handle_alter_user_scram_credentials(
    broker: Broker, context: RequestContext, request: AlterUserScramCredentialsRequest
) -> Any:
    named = [(d.name, d.mechanism) for d in request.deletions]
    named += [(u.name, u.mechanism) for u in request.upsertions]
    errors: dict[str, tuple[int, str]] = {}
    denied = context.access.cluster()
    if denied:
        errors = {user: (denied, "not authorized to alter credentials") for user, _ in named}
    for (user, _mechanism), times in Counter(named).items():
        if times > 1:
            errors[user] = (
                DuplicateResourceError.code,
                "A user credential cannot be altered twice in the same request",
            )
    upsert: list[tuple[str, ScramCredential]] = []
    delete: list[tuple[str, str]] = []
    for d in request.deletions:
        name = MECHANISM_IDS.get(d.mechanism)
        if d.name in errors:
            continue
        if name is None:
            errors[d.name] = (
                UnsupportedSaslMechanismError.code,
                f"unknown mechanism {d.mechanism}",
            )
        elif broker.store.scram_credential(name, d.name) is None:
            errors[d.name] = (
                ResourceNotFoundError.code,
                "Attempt to delete a user credential that does not exist",
            )
        else:
            delete.append((name, d.name))
    for u in request.upsertions:
        if u.name in errors:
            continue
        try:
            upsert.append(
                (
                    u.name,
                    upserted_credential(
                        u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password)
                    ),
                )
            )
        except KafkaError as exc:
            errors[u.name] = (exc.code, exc.message)
    upsert = [(user, c) for user, c in upsert if user not in errors]
    delete = [(m, user) for m, user in delete if user not in errors]
    await broker.store.alter_scram_credentials(upsert, delete)
    users = dict.fromkeys(user for user, _ in named)
    results = [
        _Altered(
            user=user,
            error_code=errors.get(user, (0, None))[0],
            error_message=errors.get(user, (0, None))[1],
        )
        for user in users
    ]
    return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=results)
