"""How a listener authenticates its connections, and each connection's authentication
(Kafka's ``SaslServerAuthenticator``).

A PLAINTEXT connection is ``User:ANONYMOUS`` from its first byte. On a SASL listener a
connection may send only ApiVersions, SaslHandshake and SaslAuthenticate until it has
authenticated; anything else closes it. SaslHandshake picks one of the listener's enabled
mechanisms; with v1 the tokens then come in SaslAuthenticate requests, with v0 as bare
size-prefixed tokens (``raw_tokens``). A failed login answers SASL_AUTHENTICATION_FAILED
after ``connection.failed.authentication.delay.ms`` and closes the connection. With
``connections.max.reauth.ms`` a session expires: the client re-authenticates (KIP-368) as
the same principal, or the broker closes the connection at its next request.

Credentials: PLAIN users from the listener's JAAS config (``user_NAME="password"``, as
Kafka's PlainLoginModule); SCRAM users from the cluster's metadata (``kafka-configs
--entity-type users``).
"""

from __future__ import annotations

import hmac
import re
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from partita.client.security import ClientSecurity, jaas_login
from partita.cluster.store import MetadataStore
from partita.errors import (
    IllegalSaslStateError,
    InvalidConfigurationError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from partita.protocol.api import ApiKey
from partita.security.plain import PlainServer
from partita.security.scram import HASHES, ScramServer
from partita.security.ssl_principal import SslPrincipalMapper, certificate_dn
from partita.security.tls import TLS_DEFAULTS, TlsSettings
from partita.server.config import BrokerConfig, ListenerSpec
from partita.server.request_context import ANONYMOUS, KafkaPrincipal

SASL_MECHANISMS = ("PLAIN", *HASHES)
# What a connection may send before it has logged in (and what quotas never count).
LOGIN_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
_JAAS_USER = re.compile(r'\buser_([^\s=]+)\s*=\s*"([^"]*)"')


class SaslServer(Protocol):
    username: str | None

    def respond(self, message: bytes) -> bytes: ...


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """What one listener asks of its connections."""

    name: str
    protocol: str  # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    store: MetadataStore  # the SCRAM credentials
    tls: ssl.SSLContext | None = None
    principal_mapper: SslPrincipalMapper | None = None  # a client certificate's DN -> name
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = field(default_factory=dict, repr=False)  # passwords
    failed_delay_ms: int = 100
    max_reauth_ms: int = 0
    max_receive_before_login: int = 524288  # Kafka's sasl.server.max.receive.size

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @classmethod
    def from_config(
        cls, config: BrokerConfig, name: str, protocol: str, store: MetadataStore
    ) -> ListenerSecurity:
        prefix = f"listener.name.{name.lower()}."
        values = config.values
        tls = mapper = None
        if protocol in ("SSL", "SASL_SSL"):
            settings = listener_tls_settings(config, name)
            mapper = SslPrincipalMapper.from_rules(settings.get("ssl.principal.mapping.rules"))
            tls = settings.server_context()

        def setting(key: str) -> str:
            """A listener's own setting, else the broker's (its default included)."""
            return values.get(prefix + key, values[key])

        def number(key: str) -> int:
            try:
                return int(setting(key))
            except ValueError:
                raise InvalidConfigurationError(
                    f"{key}={setting(key)!r} is not an integer"
                ) from None

        mechanisms: tuple[str, ...] = ()
        users: dict[str, str] = {}
        if protocol.startswith("SASL_"):
            mechanisms = tuple(
                m.strip().upper()
                for m in setting("sasl.enabled.mechanisms").split(",")
                if m.strip()
            )
            unsupported = [m for m in mechanisms if m not in SASL_MECHANISMS]
            if unsupported or not mechanisms:
                raise InvalidConfigurationError(
                    f"{prefix}sasl.enabled.mechanisms: {', '.join(unsupported) or 'none'} "
                    f"not supported; partita offers {', '.join(SASL_MECHANISMS)}"
                )
            users = dict(_JAAS_USER.findall(values.get(prefix + "plain.sasl.jaas.config", "")))
        return cls(
            name,
            protocol,
            store,
            tls,
            mapper,
            mechanisms,
            users,
            number("connection.failed.authentication.delay.ms"),
            number("connections.max.reauth.ms"),
            number("sasl.server.max.receive.size"),
        )

    def check_plain(self, user: str, password: str) -> bool:
        """A PLAIN login checks the listener's JAAS users, as Kafka's PlainServer does.
        (Never the SCRAM credentials: that would run thousands of PBKDF2 iterations on
        the event loop for anyone who has not logged in.)"""
        known = self.plain_users.get(user)
        return known is not None and hmac.compare_digest(known.encode(), password.encode())

    def mechanism(self, name: str) -> SaslServer:
        if name == "PLAIN":
            return PlainServer(self.check_plain)
        return ScramServer(name, self.store.scram_credential)


def listener_tls_settings(config: BrokerConfig, name: str) -> TlsSettings:
    """A listener's ``ssl.*`` settings: ``listener.name.<name>.ssl.*`` over ``ssl.*``."""
    prefix = f"listener.name.{name.lower()}."
    values = config.values
    chosen = {
        key: values.get(prefix + key, values.get(key, default))
        for key, default in TLS_DEFAULTS.items()
    }
    return TlsSettings(chosen, where=f"listener {name}")


def inter_broker_security(config: BrokerConfig, listener: ListenerSpec) -> ClientSecurity:
    """How this broker reaches the others' inter-broker listener, as Kafka's brokers do:
    its TLS settings (truststore to check them; keystore as client certificate), and a
    SASL login with ``sasl.mechanism.inter.broker.protocol`` as the user and password of
    that mechanism's JAAS config on the listener (``username=``/``password=``)."""
    if listener.protocol == "PLAINTEXT":
        return ClientSecurity()
    tls = listener_tls_settings(config, listener.name).client_context() if listener.tls else None
    if not listener.sasl:
        return ClientSecurity(listener.protocol, tls=tls)
    mechanism = config.get("sasl.mechanism.inter.broker.protocol").strip().upper()
    if mechanism not in SASL_MECHANISMS:
        raise InvalidConfigurationError(
            f"sasl.mechanism.inter.broker.protocol={mechanism}: the inter-broker listener "
            f"{listener.name} is {listener.protocol}; set it to one of {', '.join(SASL_MECHANISMS)}"
        )
    key = f"listener.name.{listener.name.lower()}.{mechanism.lower()}.sasl.jaas.config"
    jaas = config.values.get(key) or config.values.get("sasl.jaas.config", "")
    options = jaas_login(jaas)
    if "username" not in options or "password" not in options:
        raise InvalidConfigurationError(
            f'{key} must give the broker\'s own username="..." password="..." '
            "to log in to the other brokers"
        )
    return ClientSecurity(
        listener.protocol, mechanism, options["username"], options["password"], tls
    )


class Session:
    """One connection's authentication state."""

    def __init__(
        self, security: ListenerSecurity, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.security = security
        self.clock = clock
        self.principal: KafkaPrincipal = ANONYMOUS
        self.principal_name = str(ANONYMOUS)  # what ACLs name it by, made once
        self.authenticated = not security.sasl
        self.raw_tokens = False  # after a v0 handshake: bare tokens, not requests
        self.failed: str | None = None  # set on a failed login: close after the delay
        self.expires_at: float | None = None
        self.throttle_ms = 0  # the last response's quota throttle: mute for that long
        self._exchange: SaslServer | None = None
        self._mechanism = ""

    def tls_peer(self, certificate: bytes | None) -> None:
        """On an SSL listener a client is who its certificate says (mutual TLS, the DN
        mapped by ssl.principal.mapping.rules), else ANONYMOUS. On SASL_SSL the SASL
        login decides. Raises NoMatchingRuleError when no rule maps the DN."""
        mapper = self.security.principal_mapper
        if self.security.sasl or certificate is None or mapper is None:
            return
        principal = KafkaPrincipal("User", mapper.name(certificate_dn(certificate)))
        self.principal, self.principal_name = principal, str(principal)

    def admits(self, api_key: int) -> bool:
        """Whether a request of this API may be served now."""
        if api_key in LOGIN_APIS:
            return True
        if not self.authenticated:
            return False
        return self.expires_at is None or self.clock() < self.expires_at

    def handshake(self, mechanism: str) -> None:
        """SaslHandshake: start an exchange with ``mechanism``; raises with Kafka's codes."""
        if not self.security.sasl:
            raise IllegalSaslStateError(f"listener {self.security.name} does not use SASL")
        if self._exchange is not None:
            raise IllegalSaslStateError("a SASL exchange is already in progress")
        if self.authenticated:
            # KIP-368: re-authentication only where sessions expire, with the same mechanism.
            if self.security.max_reauth_ms <= 0:
                raise IllegalSaslStateError("re-authentication is not enabled on this listener")
            if mechanism != self._mechanism:
                raise UnsupportedSaslMechanismError(
                    f"re-authentication must use {self._mechanism}, not {mechanism}"
                )
        if mechanism not in self.security.mechanisms:
            self.failed = f"mechanism {mechanism!r} is not enabled"  # Kafka closes too
            raise UnsupportedSaslMechanismError(
                f"mechanism {mechanism!r} is not enabled on listener {self.security.name}"
            )
        self._exchange = self.security.mechanism(mechanism)
        self._mechanism = mechanism

    def authenticate(self, token: bytes) -> bytes:
        """One SASL token; the answer to send back. A failure ends the connection."""
        exchange = self._exchange
        if exchange is None:
            raise IllegalSaslStateError("SaslAuthenticate before SaslHandshake")
        try:
            answer = exchange.respond(token)
        except SaslAuthenticationFailedError as exc:
            self.failed = exc.message
            self._exchange = None
            raise
        if exchange.username is not None:
            principal = KafkaPrincipal("User", exchange.username)
            if self.authenticated and principal != self.principal:
                self.failed = f"re-authenticated as {principal}, not {self.principal}"
                raise SaslAuthenticationFailedError(
                    "Cannot change principals during re-authentication"
                )
            self.principal, self.authenticated, self._exchange = principal, True, None
            self.principal_name = str(principal)
            self.raw_tokens = False
            lifetime = self.security.max_reauth_ms
            self.expires_at = self.clock() + lifetime / 1000 if lifetime > 0 else None
        return answer

    def session_lifetime_ms(self) -> int:
        if self.expires_at is None:
            return 0
        return max(1, int((self.expires_at - self.clock()) * 1000))
