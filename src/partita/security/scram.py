"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as a Kafka broker serves them:
salted, iterated credentials, and the server side of the exchange as a sans-IO state
machine (Kafka's ``ScramSaslServer``).

A credential keeps the salt, the iteration count, the stored key ``H(ClientKey)`` and the
server key, never the password: a stolen credential lets nobody log in, and the server
proves it knows the password's derivation by the signature the client checks.

The exchange is two round trips: the client's first message (user name and nonce) is
answered with the combined nonce, the salt and the iterations; the client's final message
(the proof) with the server's signature. Anything else -- a malformed message, channel
binding, an unknown user, a wrong nonce or proof, a message after the end -- fails with
SASL_AUTHENTICATION_FAILED and ends the exchange.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from partita.errors import SaslAuthenticationFailedError

HASHES: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# Kafka's bounds for a credential's iteration count (ScramMechanism.minIterations, and the
# upper bound kafka-configs enforces).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
MAX_MESSAGE_BYTES = 4096  # a SCRAM message is a few hundred bytes; refuse anything absurd


@dataclass(frozen=True, slots=True)
class ScramCredential:
    mechanism: str
    salt: bytes
    iterations: int
    # Not shown: a stolen stored key plus a sniffed exchange would let one log in.
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)


def make_credential(
    mechanism: str, password: str, *, iterations: int = MIN_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """A credential for ``password`` (Kafka's ScramFormatter), with a random salt."""
    hash_name = _hash_name(mechanism)
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be in [{MIN_ITERATIONS}, {MAX_ITERATIONS}]")
    salt = salt if salt is not None else secrets.token_bytes(32)
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)
    client_key = _hmac(hash_name, salted, b"Client Key")
    return ScramCredential(
        mechanism,
        salt,
        iterations,
        hashlib.new(hash_name, client_key).digest(),
        _hmac(hash_name, salted, b"Server Key"),
    )


CredentialLookup = Callable[[str, str], ScramCredential | None]  # (mechanism, user)


class ScramServer:
    """One SCRAM exchange, server side. ``respond`` takes each client message and returns
    the answer; ``username`` is set once the client proved it knows the password."""

    def __init__(
        self,
        mechanism: str,
        credentials: CredentialLookup,
        nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24),
    ) -> None:
        self.mechanism = mechanism
        self._hash = _hash_name(mechanism)
        self._credentials = credentials
        self._nonce = nonce
        self._state = "first"
        self._user = ""
        self._credential: ScramCredential | None = None
        self._gs2_header = b""
        self._client_first_bare = b""
        self._server_first = b""
        self._combined_nonce = ""
        self.username: str | None = None

    @property
    def complete(self) -> bool:
        return self.username is not None

    def respond(self, message: bytes) -> bytes:
        state, self._state = self._state, "failed"  # any exception below ends the exchange
        if len(message) > MAX_MESSAGE_BYTES:
            raise _failed("SCRAM message too large")
        if state == "first":
            answer = self._first(message)
            self._state = "final"
            return answer
        if state == "final":
            answer = self._final(message)
            self._state = "done"
            return answer
        raise _failed("the SCRAM exchange is over; no further message is expected")

    def _first(self, message: bytes) -> bytes:
        text = _text(message)
        # gs2-header: "n" (no channel binding) or "y" (client could, thinks we cannot),
        # an optional authzid "a=...", then the bare message.
        flag, _, rest = text.partition(",")
        authzid, _, bare = rest.partition(",")
        if flag not in ("n", "y"):
            raise _failed("channel binding is not supported")
        attributes = _attributes(bare)
        if "m" in attributes:
            raise _failed("mandatory SCRAM extensions are not supported")
        user = _saslname(attributes.get("n"))
        client_nonce = attributes.get("r", "")
        if not client_nonce or not _printable(client_nonce):
            raise _failed("the client nonce is missing or malformed")
        if authzid and (not authzid.startswith("a=") or _saslname(authzid[2:]) != user):
            raise _failed("the authorization id must be the user name")
        credential = self._credentials(self.mechanism, user)
        if credential is None or credential.mechanism != self.mechanism:
            raise _failed("Authentication failed: Invalid user credentials")
        self._user, self._credential = user, credential
        self._gs2_header = (text[: len(text) - len(bare)]).encode("utf-8")
        self._client_first_bare = bare.encode("utf-8")
        self._combined_nonce = client_nonce + self._nonce()
        salt = base64.b64encode(credential.salt).decode("ascii")
        self._server_first = f"r={self._combined_nonce},s={salt},i={credential.iterations}".encode(
            "ascii"
        )
        return self._server_first

    def _final(self, message: bytes) -> bytes:
        credential = self._credential
        assert credential is not None
        text = _text(message)
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise _failed("the client's final message has no proof")
        attributes = _attributes(without_proof)
        binding = attributes.get("c", "")
        if _b64(binding) != self._gs2_header:
            raise _failed("the channel binding does not match the client's first message")
        if attributes.get("r") != self._combined_nonce:
            raise _failed("Invalid client nonce in the final client message.")
        proof = _b64(proof_part)
        auth_message = b",".join(
            (self._client_first_bare, self._server_first, without_proof.encode("utf-8"))
        )
        signature = _hmac(self._hash, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise _failed("Invalid client credentials")
        client_key = bytes(p ^ s for p, s in zip(proof, signature, strict=True))
        computed = hashlib.new(self._hash, client_key).digest()
        if not hmac.compare_digest(computed, credential.stored_key):
            raise _failed("Invalid client credentials")
        self.username = self._user
        server_signature = _hmac(self._hash, credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)


class ScramClient:
    """One SCRAM exchange, client side (partita's client, a broker logging in to
    another): ``first()``, then ``final(server_first)``, then ``verify(server_final)``,
    which checks the server's signature -- proof that the server knows the password's
    derivation, not only someone who relays."""

    def __init__(
        self,
        mechanism: str,
        username: str,
        password: str,
        nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24),
    ) -> None:
        self._hash = _hash_name(mechanism)
        self._password = password.encode("utf-8")
        name = username.replace("=", "=3D").replace(",", "=2C")
        self._nonce = nonce()
        self._first_bare = f"n={name},r={self._nonce}"
        self._auth_message = b""
        self._server_key = b""

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = _text(server_first)
        attributes = _attributes(text)
        nonce, salt = attributes.get("r", ""), _b64(attributes.get("s", ""))
        try:
            iterations = int(attributes.get("i", ""))
        except ValueError:
            raise _failed("the server sent no iteration count") from None
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise _failed("the server's nonce does not extend ours")
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise _failed(f"the server asks for {iterations} iterations")
        salted = hashlib.pbkdf2_hmac(self._hash, self._password, salt, iterations)
        client_key = _hmac(self._hash, salted, b"Client Key")
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        self._auth_message = ",".join((self._first_bare, text, without_proof)).encode("utf-8")
        signature = _hmac(self._hash, stored_key, self._auth_message)
        proof = bytes(k ^ s for k, s in zip(client_key, signature, strict=True))
        self._server_key = _hmac(self._hash, salted, b"Server Key")
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        attributes = _attributes(_text(server_final))
        if "e" in attributes:
            raise _failed(f"the server refused: {attributes['e']}")
        expected = _hmac(self._hash, self._server_key, self._auth_message)
        if not hmac.compare_digest(_b64(attributes.get("v", "")), expected):
            raise _failed("the server's signature is wrong: it does not know the password")


def _hash_name(mechanism: str) -> str:
    try:
        return HASHES[mechanism]
    except KeyError:
        raise ValueError(f"not a SCRAM mechanism: {mechanism!r}") from None


def _hmac(hash_name: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hash_name).digest()


def _failed(reason: str) -> SaslAuthenticationFailedError:
    return SaslAuthenticationFailedError(reason)


def _text(message: bytes) -> str:
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise _failed("the SCRAM message is not UTF-8") from None


def _attributes(text: str) -> dict[str, str]:
    """``k=v`` pairs of a SCRAM message; a pair that is not one is malformed."""
    found: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            # Not the bytes themselves: a client that sent its PLAIN token (its password)
            # into a SCRAM exchange must not find it echoed in logs or the answer.
            raise _failed(f"malformed SCRAM attribute ({len(part)} bytes)")
        found.setdefault(key, value)
    return found


def _saslname(name: str | None) -> str:
    """RFC 5802's escaping: ``=2C`` is a comma, ``=3D`` an equals sign; nothing else."""
    if not name:
        raise _failed("the user name is missing")
    out, i = [], 0
    while i < len(name):
        if name[i] == "=":
            escape = name[i : i + 3]
            if escape not in ("=2C", "=3D"):
                raise _failed("the user name is not escaped as SCRAM requires")
            out.append("," if escape == "=2C" else "=")
            i += 3
        else:
            out.append(name[i])
            i += 1
    return "".join(out)


def _printable(nonce: str) -> bool:
    return all(0x21 <= ord(ch) <= 0x7E and ch != "," for ch in nonce)


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise _failed("a SCRAM value is not base64") from None
