"""How partita's client reaches a secured listener: TLS, and a SASL login (PLAIN,
SCRAM-SHA-256/512) right after connecting. Used by the producer, consumer and admin
client, the Spark connector, the CLI, and a broker following another (the inter-broker
listener).

Settings take the names people already have in their client configs, librdkafka's and
the Java client's alike:

    security.protocol        PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    sasl.mechanism           PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 (or sasl.mechanisms)
    sasl.username            with sasl.password (librdkafka), or
    sasl.jaas.config         ... username="..." password="..."; (Java)
    ssl.ca.location          CA certificates (PEM) to check the broker with, or
    ssl.truststore.location  with ssl.truststore.type (PEM, PKCS12) and .password
    ssl.certificate.location with ssl.key.location (and ssl.key.password): mutual TLS,
                             or ssl.keystore.location/type/password
    ssl.endpoint.identification.algorithm   https (default: check the name) or empty
"""

from __future__ import annotations

import functools
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from partita.errors import InvalidConfigurationError
from partita.security.tls import TlsSettings

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# A JAAS config's own login (username="..." password="..."), not its user_NAME= entries.
_JAAS_OPTION = re.compile(r'(?<![\w.])(username|password)\s*=\s*"([^"]*)"')


def jaas_login(jaas: str) -> dict[str, str]:
    """The ``username`` and ``password`` options of a JAAS config, as found."""
    return dict(_JAAS_OPTION.findall(jaas))


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str = "PLAIN"
    username: str = ""
    password: str = field(default="", repr=False)  # never in a log line or a traceback
    tls: ssl.SSLContext | None = None

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @classmethod
    def from_config(cls, settings: Mapping[str, str]) -> ClientSecurity:
        protocol = settings.get("security.protocol", "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise InvalidConfigurationError(
                f"security.protocol={protocol!r}: expected one of {', '.join(PROTOCOLS)}"
            )
        mechanism = (
            (settings.get("sasl.mechanism") or settings.get("sasl.mechanisms") or "PLAIN")
            .strip()
            .upper()
        )
        username = settings.get("sasl.username", "")
        password = settings.get("sasl.password", "")
        jaas = settings.get("sasl.jaas.config", "")
        if jaas:
            options = jaas_login(jaas)
            username = options.get("username", username)
            password = options.get("password", password)
        if protocol.startswith("SASL_"):
            if mechanism not in MECHANISMS:
                raise InvalidConfigurationError(
                    f"sasl.mechanism={mechanism!r}: partita's client speaks {', '.join(MECHANISMS)}"
                )
            if not username:
                raise InvalidConfigurationError(
                    f"security.protocol={protocol} needs sasl.username and sasl.password "
                    "(or sasl.jaas.config)"
                )
        tls = client_tls(settings) if protocol in ("SSL", "SASL_SSL") else None
        return cls(protocol, mechanism, username, password, tls)


@functools.lru_cache(maxsize=16)
def security_of(settings: tuple[tuple[str, str], ...]) -> ClientSecurity:
    """``ClientSecurity.from_config`` once per process per settings: a TLS context reads
    its files once, not at every connection (a Spark task connects many times)."""
    return ClientSecurity.from_config(dict(settings))


def client_tls(settings: Mapping[str, str]) -> ssl.SSLContext:
    """A client TLS context from librdkafka's or the Java client's names."""
    values = {k: v for k, v in settings.items() if k.startswith("ssl.")}
    ca = settings.get("ssl.ca.location")
    if ca:
        values.setdefault("ssl.truststore.location", ca)
        values.setdefault("ssl.truststore.type", "PEM")
    certificate, key = settings.get("ssl.certificate.location"), settings.get("ssl.key.location")
    if certificate or key:
        if not (certificate and key):
            raise InvalidConfigurationError(
                "ssl.certificate.location and ssl.key.location go together"
            )
        try:
            values["ssl.keystore.certificate.chain"] = Path(certificate).read_text("ascii")
            values["ssl.keystore.key"] = Path(key).read_text("ascii")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidConfigurationError(f"cannot read the client certificate: {exc}") from None
    if values.get("ssl.truststore.location") and "ssl.truststore.type" not in values:
        values["ssl.truststore.type"] = "PEM"
    if values.get("ssl.keystore.location") and "ssl.keystore.type" not in values:
        values["ssl.keystore.type"] = "PEM"
    return TlsSettings(values, where="client").client_context()
