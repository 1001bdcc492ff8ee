"""`partita cluster up` and `partita cluster describe`, through the real CLI."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)


def _partita(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "partita.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cluster_up_describe_and_a_clean_stop(tmp_path: Path) -> None:
    out = tmp_path / "up.out"
    with out.open("w") as sink:
        up = subprocess.Popen(
            [sys.executable, "-m", "partita.cli.main", "cluster", "up", "--brokers", "3",
             "--racks", "a,b,c", "--etcd-members", "3", "--data-dir", str(tmp_path / "c")],
            stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while "Ctrl-C stops" not in out.read_text():
                assert up.poll() is None, out.read_text()
                assert time.monotonic() < deadline, out.read_text()
                time.sleep(0.1)
            text = out.read_text()
            bootstrap = re.search(r"bootstrap\s+(\S+)", text)
            assert bootstrap, text
            servers = bootstrap.group(1)
            assert len(servers.split(",")) == 3
            metadata = re.search(r"metadata\s+etcd://(\S+)/partita", text)
            assert metadata and len(metadata.group(1).split(",")) == 3, text  # a quorum
            assert "controller" in text
            created = _partita("-b", servers, "topic", "create", "orders", "-p", "6", "-r", "3")
            assert created.returncode == 0, created.stderr
            described = _partita("-b", servers, "cluster", "describe")
            assert described.returncode == 0, described.stderr
            lines = [ln for ln in described.stdout.splitlines() if ln.startswith("Broker ")]
            assert len(lines) == 3
            for line in lines:
                assert line.count("-Leader") == 2, line
                assert line.count("-Follower") == 4, line
            produced = subprocess.run(
                [sys.executable, "-m", "partita.cli.main", "-b", servers, "produce", "orders",
                 "--key-sep", ":"],
                input="".join(f"hot:{i}\n" for i in range(200)) + "cold:1\n",
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert produced.returncode == 0, produced.stderr
            skew = _partita("-b", servers, "cluster", "describe")
            assert "hottest orders/P" in skew.stdout, skew.stdout
            assert "biggest partitions" in skew.stdout
            assert "bytes-in/s" in skew.stdout
            topic = _partita("-b", servers, "topic", "describe", "orders")
            assert topic.returncode == 0 and "offline" in topic.stdout
        finally:
            started = time.monotonic()
            up.send_signal(signal.SIGTERM)
            code = up.wait(60)
        assert code == 0, out.read_text()
        assert time.monotonic() - started < 20
        assert "stopped" in out.read_text()


def test_a_secure_cluster_and_the_security_commands(tmp_path: Path) -> None:
    """`cluster up --secure`: TLS + SASL with ACLs, the admin's client configs printed;
    then, through the CLI only: a SCRAM user, its ACLs and a quota are made, the user
    writes and reads its topic and nothing else, and kcat connects with the
    librdkafka config the cluster wrote."""
    out = tmp_path / "up.out"
    data = tmp_path / "c"
    with out.open("w") as sink:
        up = subprocess.Popen(
            [sys.executable, "-m", "partita.cli.main", "cluster", "up", "--brokers", "3",
             "--secure", "--data-dir", str(data)],
            stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 90
            while "Ctrl-C stops" not in out.read_text():
                assert up.poll() is None, out.read_text()
                assert time.monotonic() < deadline, out.read_text()
                time.sleep(0.1)
            text = out.read_text()
            found = re.search(r"bootstrap\s+(\S+)", text)
            assert found, text
            servers = found.group(1)
            admin_config = data / "security" / "client.properties"
            assert f"--command-config {admin_config}" in text
            admin = ["--command-config", str(admin_config), "-b", servers]

            # Without credentials: refused, one line.
            bare = _partita("-b", servers, "topic", "list")
            assert bare.returncode == 1 and bare.stderr.count("\n") == 1, bare.stderr

            for args in (
                ["topic", "create", "ledger", "-p", "3", "-r", "3"],
                ["topic", "create", "secret", "-p", "1", "-r", "3"],
                ["user", "add", "alice", "--password", "alice-pw", "-m", "SCRAM-SHA-512"],
                ["acl", "add", "--allow-principal", "User:alice", "-o", "write", "-o", "read",
                 "--topic", "ledger"],
                ["acl", "add", "--allow-principal", "User:alice", "-o", "read", "--group",
                 "auditors"],
                ["quota", "set", "--user", "alice", "producer_byte_rate=10485760"],
            ):  # fmt: skip
                done = _partita(*admin, *args)
                assert done.returncode == 0, (args, done.stderr)
            users = _partita(*admin, "user", "list")
            assert "alice" in users.stdout and "SCRAM-SHA-512" in users.stdout
            assert "alice-pw" not in users.stdout
            acls = _partita(*admin, "acl", "list", "--topic", "ledger")
            assert acls.stdout.count("User:alice") == 2, acls.stdout
            quotas = _partita(*admin, "quota", "describe", "--user", "alice")
            assert "10485760" in quotas.stdout, quotas.stdout

            alice = [
                "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanism=SCRAM-SHA-512",
                "-X", "sasl.username=alice", "-X", "sasl.password=alice-pw",
                "-X", f"ssl.ca.location={data / 'security' / 'ca.pem'}", "-b", servers,
            ]  # fmt: skip
            produced = subprocess.run(
                [sys.executable, "-m", "partita.cli.main", *alice, "produce", "ledger"],
                input="".join(f"entry-{i}\n" for i in range(20)),
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert produced.returncode == 0, produced.stderr
            consumed = _partita(
                *alice, "consume", "ledger", "-o", "beginning", "--exit", "--format", "value"
            )
            assert consumed.returncode == 0, consumed.stderr
            assert sorted(consumed.stdout.split()) == sorted(f"entry-{i}" for i in range(20))
            refused = _partita(*alice, "consume", "secret", "-o", "beginning", "--exit")
            assert refused.returncode == 1, refused.stdout
            assert "authoriz" in refused.stderr.lower(), refused.stderr

            kcat = subprocess.run(
                ["kcat", "-F", str(data / "security" / "librdkafka.properties"), "-b",
                 servers, "-L", "-t", "ledger"],
                capture_output=True, text=True, timeout=30, check=False,
            )  # fmt: skip
            assert kcat.returncode == 0, kcat.stderr
            assert "3 brokers" in kcat.stdout and "ledger" in kcat.stdout
        finally:
            up.send_signal(signal.SIGTERM)
            code = up.wait(60)
        assert code == 0, out.read_text()


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_cluster_up_on_hosts_runs_the_printed_client_command_and_leaves_no_host(
    tmp_path: Path,
) -> None:
    """`cluster up --hosts`: three hosts with a broker and an etcd member each, the
    client command it prints works from the client host, and SIGTERM takes every host
    down with the cluster."""
    out = tmp_path / "up.out"
    with out.open("w") as sink:
        up = subprocess.Popen(
            [sys.executable, "-m", "partita.cli.main", "cluster", "up", "--hosts",
             "--data-dir", str(tmp_path / "c")],
            stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while "Ctrl-C stops" not in out.read_text():
                assert up.poll() is None, out.read_text()
                assert time.monotonic() < deadline, out.read_text()
                time.sleep(0.1)
            text = out.read_text()
            metadata = re.search(r"metadata\s+etcd://(\S+)/partita", text)
            assert metadata, text
            members = metadata.group(1).split(",")
            assert len(members) == 3 and all(m.startswith("10.213.") for m in members), text
            command = re.search(r"^\s+(ip netns exec \S+ kcat -b \S+ -L)$", text, re.M)
            assert command, text
            netns = command.group(1).split()[3]
            listed = subprocess.run(
                command.group(1).split(), capture_output=True, text=True, timeout=30, check=False
            )
            assert listed.returncode == 0, listed.stderr
            brokers = re.findall(r"broker \d at (\S+)", listed.stdout)
            assert sorted(brokers) == sorted(f"{m.split(':')[0]}:9092" for m in members)
            assert "127.0.0.1" not in listed.stdout
        finally:
            up.send_signal(signal.SIGTERM)
            code = up.wait(60)
        assert code == 0, out.read_text()
        namespaces = subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True, timeout=20, check=True
        ).stdout
        prefix = netns.rsplit("-", 1)[0] + "-"
        assert prefix not in namespaces, namespaces
    refused = _partita("cluster", "up", "--hosts", "--brokers", "2", "--etcd-members", "3",
                       "--data-dir", str(tmp_path / "r"))  # fmt: skip
    assert refused.returncode == 1
    assert refused.stderr.strip().endswith("3 etcd members need as many hosts: 2"), refused.stderr
    assert (
        prefix
        not in subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True, timeout=20, check=True
        ).stdout
    )
