"""SASL PLAIN (RFC 4616) as a Kafka broker serves it: one message, ``authzid NUL authcid
NUL password``; the authorization id, when given, must be the user name (Kafka's
``PlainServer``). Sans-IO: the password check is the caller's (a users file, or the
cluster's metadata)."""

from __future__ import annotations

from collections.abc import Callable

from partita.errors import SaslAuthenticationFailedError

MAX_MESSAGE_BYTES = 4096

PasswordCheck = Callable[[str, str], bool]  # (user, password) -> valid


class PlainServer:
    mechanism = "PLAIN"

    def __init__(self, check: PasswordCheck) -> None:
        self._check = check
        self._done = False
        self.username: str | None = None

    @property
    def complete(self) -> bool:
        return self.username is not None

    def respond(self, message: bytes) -> bytes:
        if self._done:
            raise SaslAuthenticationFailedError("the PLAIN exchange is over")
        self._done = True
        if len(message) > MAX_MESSAGE_BYTES:
            raise SaslAuthenticationFailedError("PLAIN message too large")
        try:
            authzid, user, password = message.decode("utf-8").split("\0")
        except (UnicodeDecodeError, ValueError):
            raise SaslAuthenticationFailedError(
                "Invalid SASL/PLAIN response: expected 3 tokens"
            ) from None
        if not user:
            raise SaslAuthenticationFailedError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailedError("Authentication failed: password not specified")
        if authzid and authzid != user:
            raise SaslAuthenticationFailedError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        if not self._check(user, password):
            raise SaslAuthenticationFailedError(
                "Authentication failed: Invalid username or password"
            )
        self.username = user
        return b""
