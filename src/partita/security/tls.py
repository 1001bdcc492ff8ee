"""TLS contexts from Kafka's ``ssl.*`` settings, for a listener (server) or a client.

Keystores and truststores come as Kafka accepts them: PEM files (``ssl.keystore.type=PEM``:
the private key and its certificate chain in one file; a truststore of CA certificates),
PEM given inline (``ssl.keystore.key`` + ``ssl.keystore.certificate.chain``,
``ssl.truststore.certificates``), or PKCS12 files with their passwords. JKS, Java's own
format, is refused with a line saying to convert it (``keytool -importkeystore
-deststoretype PKCS12``).

Python's ``ssl`` loads keys only from files: a PKCS12 or inline key is written, as PEM,
to a file only this process can read, loaded, and removed at once.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from partita.errors import InvalidConfigurationError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.serialization.pkcs12 import PKCS12KeyAndCertificates

CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
PROTOCOLS = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
# Kafka's defaults for a listener or client that sets nothing else.
TLS_DEFAULTS: dict[str, str] = {
    "ssl.keystore.type": "JKS",
    "ssl.keystore.location": "",
    "ssl.keystore.password": "",
    "ssl.key.password": "",
    "ssl.keystore.key": "",
    "ssl.keystore.certificate.chain": "",
    "ssl.truststore.type": "JKS",
    "ssl.truststore.location": "",
    "ssl.truststore.password": "",
    "ssl.truststore.certificates": "",
    "ssl.client.auth": "none",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "ssl.protocol": "TLSv1.3",
    "ssl.endpoint.identification.algorithm": "https",
    "ssl.cipher.suites": "",
    "ssl.principal.mapping.rules": "DEFAULT",
}


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """One listener's (or one client's) ``ssl.*`` settings, by Kafka's names."""

    values: Mapping[str, str] = field(repr=False)  # passwords, inline keys
    where: str = "ssl"  # named in error messages: "listener SSL", "client"

    def get(self, key: str) -> str:
        return self.values.get(key, TLS_DEFAULTS[key]).strip()

    def server_context(self) -> ssl.SSLContext:
        """A listener's context: its key and certificate, and, unless
        ``ssl.client.auth=none``, the CAs it checks client certificates against."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._protocols(context)
        self._unsupported()
        if not self._load_key(context):
            raise InvalidConfigurationError(
                f"{self.where}: a TLS listener needs a keystore "
                "(ssl.keystore.location, or ssl.keystore.key and ssl.keystore.certificate.chain)"
            )
        auth = self.get("ssl.client.auth").lower()
        if auth not in CLIENT_AUTH:
            raise InvalidConfigurationError(
                f"{self.where}: ssl.client.auth={auth!r}: expected none, requested or required"
            )
        context.verify_mode = CLIENT_AUTH[auth]
        if auth != "none" and not self._load_trust(context):
            raise InvalidConfigurationError(
                f"{self.where}: ssl.client.auth={auth} needs a truststore to check clients against"
            )
        return context

    def client_context(self) -> ssl.SSLContext:
        """A client's context (another broker, partita's own client): the broker's
        certificate checked against the truststore (the system's CAs without one), its
        name against the address unless ``ssl.endpoint.identification.algorithm`` is
        empty, and a client certificate when a keystore is given (mutual TLS)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self._protocols(context)
        self._unsupported()
        if not self._load_trust(context):
            context.load_default_certs()
        algorithm = self.get("ssl.endpoint.identification.algorithm").lower()
        if algorithm not in ("", "https"):
            raise InvalidConfigurationError(
                f"{self.where}: ssl.endpoint.identification.algorithm={algorithm!r}: "
                "expected https or empty"
            )
        context.check_hostname = algorithm == "https"
        self._load_key(context)
        return context

    def _protocols(self, context: ssl.SSLContext) -> None:
        names = [p.strip() for p in self.get("ssl.enabled.protocols").split(",") if p.strip()]
        unknown = [n for n in names if n not in PROTOCOLS]
        if unknown or not names:
            raise InvalidConfigurationError(
                f"{self.where}: ssl.enabled.protocols: {', '.join(unknown) or 'none given'}; "
                f"partita offers {', '.join(PROTOCOLS)}"
            )
        versions = sorted(PROTOCOLS[n] for n in names)
        context.minimum_version, context.maximum_version = versions[0], versions[-1]

    def _unsupported(self) -> None:
        if self.get("ssl.cipher.suites"):
            raise InvalidConfigurationError(
                f"{self.where}: ssl.cipher.suites: Java's cipher names are not OpenSSL's; leave "
                "it empty (OpenSSL's defaults, TLS 1.2 and 1.3 AEAD suites)"
            )

    # -- keys and certificates ------------------------------------------------------

    def _load_key(self, context: ssl.SSLContext) -> bool:
        key_pem, chain_pem = (
            self.get("ssl.keystore.key"),
            self.get("ssl.keystore.certificate.chain"),
        )
        password = self.get("ssl.key.password") or self.get("ssl.keystore.password") or None
        if key_pem or chain_pem:
            if not (key_pem and chain_pem):
                raise InvalidConfigurationError(
                    f"{self.where}: ssl.keystore.key and ssl.keystore.certificate.chain go together"
                )
            _load_pem_chain(context, (chain_pem + "\n" + key_pem).encode(), password, self.where)
            return True
        location = self.get("ssl.keystore.location")
        if not location:
            return False
        kind = self.get("ssl.keystore.type").upper()
        path = Path(location)
        if kind == "PEM":
            try:
                context.load_cert_chain(path, password=password)
            except (OSError, ssl.SSLError) as exc:
                raise InvalidConfigurationError(
                    f"{self.where}: ssl.keystore.location={location}: {_reason(exc)}"
                ) from None
        elif kind == "PKCS12":
            store_password = self.get("ssl.keystore.password")
            _load_pem_chain(
                context, _pkcs12_key_pem(path, store_password, self.where), None, self.where
            )
        else:
            _not_jks(self.where, "keystore", kind)
        return True

    def _load_trust(self, context: ssl.SSLContext) -> bool:
        inline = self.get("ssl.truststore.certificates")
        if inline:
            _load_cas(context, inline, self.where)
            return True
        location = self.get("ssl.truststore.location")
        if not location:
            return False
        kind = self.get("ssl.truststore.type").upper()
        path = Path(location)
        if kind == "PEM":
            try:
                text = path.read_text(encoding="ascii")
            except (OSError, UnicodeDecodeError) as exc:
                raise InvalidConfigurationError(
                    f"{self.where}: ssl.truststore.location={location}: {_reason(exc)}"
                ) from None
            _load_cas(context, text, self.where)
        elif kind == "PKCS12":
            _load_cas(
                context,
                _pkcs12_certificates_pem(path, self.get("ssl.truststore.password"), self.where),
                self.where,
            )
        else:
            _not_jks(self.where, "truststore", kind)
        return True


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)


def _not_jks(where: str, store: str, kind: str) -> None:
    raise InvalidConfigurationError(
        f"{where}: ssl.{store}.type={kind}: partita reads PEM and PKCS12 {store}s; convert a "
        f"JKS one with keytool -importkeystore -deststoretype PKCS12"
    )


def _load_cas(context: ssl.SSLContext, pem: str, where: str) -> None:
    try:
        context.load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError) as exc:
        raise InvalidConfigurationError(
            f"{where}: the truststore holds no usable CA: {_reason(exc)}"
        ) from None


def _load_pem_chain(context: ssl.SSLContext, pem: bytes, password: str | None, where: str) -> None:
    """``load_cert_chain`` reads only files: through one only this process can read."""
    with tempfile.TemporaryDirectory(prefix="partita-tls-") as directory:
        path = Path(directory) / "key.pem"
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(pem)
        try:
            context.load_cert_chain(path, password=password)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidConfigurationError(
                f"{where}: cannot load the key: {_reason(exc)}"
            ) from None
        finally:
            path.unlink()


def _read_pkcs12(path: Path, password: str, where: str) -> PKCS12KeyAndCertificates:
    from cryptography.hazmat.primitives.serialization import pkcs12  # noqa: PLC0415

    try:
        return pkcs12.load_pkcs12(path.read_bytes(), password.encode() or None)
    except (OSError, ValueError) as exc:
        raise InvalidConfigurationError(
            f"{where}: cannot read PKCS12 {path}: {_reason(exc)}"
        ) from None


def _pkcs12_key_pem(path: Path, password: str, where: str) -> bytes:
    from cryptography.hazmat.primitives.serialization import (  # noqa: PLC0415
        Encoding,
        NoEncryption,
        PrivateFormat,
    )

    store = _read_pkcs12(path, password, where)
    if store.key is None or store.cert is None:
        raise InvalidConfigurationError(f"{where}: {path} holds no private key and certificate")
    key = store.key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    chain = [store.cert.certificate, *(c.certificate for c in store.additional_certs)]
    return b"".join(c.public_bytes(Encoding.PEM) for c in chain) + key


def _pkcs12_certificates_pem(path: Path, password: str, where: str) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding  # noqa: PLC0415

    store = _read_pkcs12(path, password, where)
    certificates = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certificates.append(store.cert.certificate)
    if not certificates:
        raise InvalidConfigurationError(f"{where}: {path} holds no certificate")
    return "".join(c.public_bytes(Encoding.PEM).decode("ascii") for c in certificates)
