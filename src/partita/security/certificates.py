"""A small certificate authority: a CA, and certificates it signs for brokers (with the
names and addresses clients check) and for clients (whose subject DN is their principal
under mutual TLS). ``partita cluster up --secure`` and the tests use it; a production
cluster uses its organisation's CA instead.

Keys are EC P-256 and written as PEM (private keys unencrypted, mode 0600), which every
client here reads: librdkafka, the Java client (PEM keystores since Kafka 2.7), Python's
``ssl``. PKCS12 copies are written on request, for tools that want a keystore file.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAYS = 825  # what browsers and Java accept for a leaf certificate


@dataclass(frozen=True, slots=True)
class Issued:
    """Files of one certificate: its PEM chain, its PEM key, and both in one file (a
    Kafka PEM keystore)."""

    certificate: Path
    key: Path
    keystore: Path


class CertificateAuthority:
    def __init__(self, key: ec.EllipticCurvePrivateKey, certificate: x509.Certificate) -> None:
        self.key = key
        self.certificate = certificate

    @classmethod
    def create(cls, name: str = "partita CA") -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = _now()
        certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=True,
                    crl_sign=True, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )  # fmt: skip
        return cls(key, certificate)

    def write(self, directory: Path) -> Path:
        """The CA certificate (what clients trust), ``ca.pem``; its key, ``ca-key.pem``."""
        directory.mkdir(parents=True, exist_ok=True)
        _write_key(directory / "ca-key.pem", self.key)
        path = directory / "ca.pem"
        path.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))
        return path

    def issue(
        self,
        directory: Path,
        name: str,
        *,
        subject: str | None = None,
        hosts: tuple[str, ...] = (),
        days: int = _DAYS,
        not_before: datetime.datetime | None = None,
    ) -> Issued:
        """A certificate for ``name`` (files ``<name>.pem``, ``<name>-key.pem``,
        ``<name>-keystore.pem``). ``hosts`` (names or addresses) make it a server
        certificate valid for them; ``subject`` is its DN's CN (default ``name``)."""
        directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        start = not_before or _now() - datetime.timedelta(minutes=5)
        builder = (
            x509.CertificateBuilder()
            .subject_name(
                # Most general first, as CAs write them: the DN reads CN=...,O=partita.
                x509.Name(
                    [
                        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "partita"),
                        x509.NameAttribute(NameOID.COMMON_NAME, subject or name),
                    ]
                )
            )
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
        )
        if hosts:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        chain = certificate.public_bytes(
            serialization.Encoding.PEM
        ) + self.certificate.public_bytes(serialization.Encoding.PEM)
        cert_path, key_path = directory / f"{name}.pem", directory / f"{name}-key.pem"
        cert_path.write_bytes(chain)
        _write_key(key_path, key)
        keystore = directory / f"{name}-keystore.pem"
        _write_private(keystore, _key_pem(key) + chain)
        return Issued(cert_path, key_path, keystore)

    def pkcs12(self, issued: Issued, password: str) -> Path:
        """A PKCS12 keystore of an issued certificate, for tools that want one."""
        key = serialization.load_pem_private_key(issued.key.read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        certificates = x509.load_pem_x509_certificates(issued.certificate.read_bytes())
        data = pkcs12.serialize_key_and_certificates(
            issued.certificate.stem.encode(),
            key,
            certificates[0],
            certificates[1:],
            serialization.BestAvailableEncryption(password.encode()),
        )
        path = issued.certificate.with_suffix(".p12")
        _write_private(path, data)
        return path


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    _write_private(path, _key_pem(key))


def _write_private(path: Path, data: bytes) -> None:
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
