"""What ``partita cluster up --secure`` (and the main job's ``--secure``) sets up: a CA
and a broker certificate, a SASL_SSL listener as the brokers' only one, the ACL
authorizer, a broker user and an admin user with fresh random passwords, and the client
settings to connect with (for partita, Kafka's tools, librdkafka and kcat).

Files, under ``<directory>``: ``ca.pem`` (what clients trust), ``broker*.pem``,
``client.properties`` (Kafka's tools and partita: ``--command-config``),
``librdkafka.properties`` (kcat ``-F``, confluent-kafka). Passwords are in these files
only, readable by the owner.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from partita.local.cluster import write_private_properties
from partita.security.certificates import CertificateAuthority

ADMIN_USER = "admin"
BROKER_USER = "broker"


@dataclass(frozen=True, slots=True)
class SecureSetup:
    directory: Path
    broker_settings: dict[str, str]
    client_settings: dict[str, str]  # librdkafka's and partita's names
    client_properties: Path
    librdkafka_properties: Path


def make_secure_setup(directory: Path) -> SecureSetup:
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    ca = CertificateAuthority.create("partita local CA")
    ca_file = ca.write(directory)
    broker = ca.issue(directory, "broker", hosts=("127.0.0.1", "localhost"))
    broker_password, admin_password = secrets.token_urlsafe(18), secrets.token_urlsafe(18)
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{BROKER_USER}" password="{broker_password}" '
        f'user_{BROKER_USER}="{broker_password}" user_{ADMIN_USER}="{admin_password}";'
    )
    broker_settings = {
        "listeners": "SASL_SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(broker.keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca_file),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{BROKER_USER};User:{ADMIN_USER}",
    }
    client = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": ADMIN_USER,
        "sasl.password": admin_password,
        "ssl.ca.location": str(ca_file),
    }
    java = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
        f'required username="{ADMIN_USER}" password="{admin_password}";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca_file),
    }
    client_properties = write_private_properties(directory / "client.properties", java)
    librdkafka_properties = write_private_properties(directory / "librdkafka.properties", client)
    return SecureSetup(directory, broker_settings, client, client_properties, librdkafka_properties)
