"""A local development cluster: etcd and brokers as child processes on 127.0.0.1.

``partita cluster up`` runs one; the cluster tests and the chaos suite use the same
classes, so what a developer starts by hand is what the tests prove. Every process
writes its log beside its data directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from partita.local.hosts import Host, HostLab


class ClusterStartError(RuntimeError):
    """A process of the local cluster did not come up; the message quotes its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _tail(path: Path, lines: int = 30) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _wait_for(
    proc: subprocess.Popen[bytes],
    condition: Callable[[], bool],
    timeout: float,
    what: str,
    logs: Callable[[], str],
) -> None:
    """Until ``condition`` holds; ClusterStartError, quoting ``logs``, if ``proc`` exits
    first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            raise ClusterStartError(f"{what} exited with {proc.returncode}:\n{logs()}")
        if time.monotonic() > deadline:
            raise ClusterStartError(f"{what} not ready after {timeout}s:\n{logs()}")
        time.sleep(0.05)


@dataclass(frozen=True, slots=True)
class EtcdTls:
    """etcd serving TLS and asking clients for certificates (the files, PEM)."""

    ca: Path
    certificate: Path
    key: Path
    client_certificate: Path  # what the health check shows etcd
    client_key: Path


def write_private_properties(path: Path, values: dict[str, str]) -> Path:
    """``key=value`` lines in a file created readable by its owner only (0600). A value
    ending in a backslash is refused: a properties reader takes it as continued on the
    next line and would swallow the next setting."""
    for key, value in values.items():
        if value.endswith("\\"):
            raise ValueError(f"{key}: a value ending in a backslash cannot be written")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.writelines(f"{key}={value}\n" for key, value in values.items())
    return path


class EtcdProcess:
    """One etcd member (Debian's etcd-server): alone, or one of the members
    ``initial_cluster`` names (``name=peer-url,...``). On loopback ports of its own, or
    on a host of a lab (``host``: its address; ``launcher``: what runs a command there),
    where it takes etcd's own ports, 2379 and 2380."""

    def __init__(
        self,
        data_dir: Path,
        client_port: int = 0,
        tls: EtcdTls | None = None,
        *,
        name: str = "partita-etcd",
        peer_port: int = 0,
        initial_cluster: str | None = None,
        election_timeout_ms: int | None = None,
        host: Host | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.address = host.address if host is not None else "127.0.0.1"
        self.launcher = host.launcher if host is not None else []
        if host is not None:
            client_port, peer_port = client_port or 2379, peer_port or 2380
        self.election_timeout_ms = election_timeout_ms
        self.tls = tls
        self.name = name
        self.client_port = client_port or free_port()
        self.peer_port = peer_port or free_port()
        self.initial_cluster = initial_cluster or f"{name}={self.peer_url}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}.log"

    @property
    def endpoint(self) -> str:
        return f"{self.address}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://{self.address}:{self.peer_port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 20.0, wait: bool = True) -> None:
        binary = shutil.which("etcd") or "/usr/bin/etcd"
        if not Path(binary).exists():
            raise ClusterStartError(
                "etcd is not installed: `apt-get install etcd-server` (scripts/setup.sh does)"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        scheme = "https" if self.tls else "http"
        client = f"{scheme}://{self.endpoint}"
        args = [
            *self.launcher,
            binary,
            "--name", self.name,
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", self.peer_url,
            "--initial-advertise-peer-urls", self.peer_url,
            "--initial-cluster", self.initial_cluster,
            "--log-level", "warn",
        ]  # fmt: skip
        if self.election_timeout_ms is not None:
            # etcd's rule: a heartbeat a tenth of the election timeout.
            args += [
                "--election-timeout", str(self.election_timeout_ms),
                "--heartbeat-interval", str(max(10, self.election_timeout_ms // 10)),
            ]  # fmt: skip
        if self.tls is not None:
            args += [
                "--cert-file", str(self.tls.certificate),
                "--key-file", str(self.tls.key),
                "--trusted-ca-file", str(self.tls.ca),
                "--client-cert-auth",
            ]  # fmt: skip
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(args, stdout=log, stderr=log, start_new_session=True)
        if wait:
            self.wait_healthy(timeout)

    def wait_healthy(self, timeout: float = 20.0) -> None:
        """Until the member answers healthy: it has a leader (a member of several waits
        for a quorum of them to run)."""
        assert self.proc is not None
        _wait_for(self.proc, self.healthy, timeout, "etcd", self.logs)

    def healthy(self) -> bool:
        context = None
        if self.tls is not None:
            context = ssl.create_default_context(cafile=str(self.tls.ca))
            context.load_cert_chain(self.tls.client_certificate, self.tls.client_key)
        scheme = "https" if self.tls else "http"
        try:
            with urllib.request.urlopen(
                f"{scheme}://{self.endpoint}/health", timeout=0.5, context=context
            ) as response:
                return b'"true"' in response.read()
        except urllib.error.HTTPError as exc:
            return exc.code == 401  # etcd's authentication is on: it is up
        except OSError:
            return False

    def status(self) -> dict[str, str] | None:
        """The member's own view (etcd's Maintenance.Status through its HTTP gateway):
        ``member_id`` and ``leader`` (the leader's member id, "0" while it has none);
        None if it does not answer."""
        if self.tls is not None:
            raise NotImplementedError("status of a TLS member")
        request = urllib.request.Request(
            f"http://{self.endpoint}/v3/maintenance/status", data=b"{}", method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=1.0) as response:
                answer = json.loads(response.read())
        except (OSError, ValueError):
            return None
        return {
            "member_id": str(answer.get("header", {}).get("member_id", "0")),
            "leader": str(answer.get("leader", "0")),
        }

    def logs(self) -> str:
        return _tail(self.log_path)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


class EtcdCluster:
    """``members`` etcd members on loopback, one quorum: the layout a production cluster
    runs (three or five members), so that losing one loses nothing and stops nothing.

    Losing etcd's leader stops lease renewals until the others elect a new one: etcd's
    default election timeout (1 s, each member waiting 1-2 s at random, a split vote
    more) can take longer than the margin a broker's 3 s lease leaves, and the brokers
    would fence themselves for a moment. Members on one machine or one LAN elect in half
    that (``ELECTION_TIMEOUT_MS``), as etcd's tuning guide allows for a short round
    trip; docs/operations.md says what a deployment should do."""

    ELECTION_TIMEOUT_MS = 500

    def __init__(self, base: Path, members: int = 3, hosts: list[Host] | None = None) -> None:
        """``members`` on loopback, or one on each of ``hosts``."""
        names = [f"etcd-{i}" for i in range(1, (len(hosts) if hosts else members) + 1)]
        on = dict(zip(names, hosts or [], strict=False))
        self.members = [
            EtcdProcess(
                base / name,
                name=name,
                peer_port=0 if name in on else free_port(),
                election_timeout_ms=self.ELECTION_TIMEOUT_MS,
                host=on.get(name),
            )
            for name in names
        ]
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        for member in self.members:
            member.initial_cluster = initial

    @property
    def endpoints(self) -> str:
        return ",".join(m.endpoint for m in self.members)

    def member(self, number: int) -> EtcdProcess:
        return self.members[number - 1]

    def leader(self) -> EtcdProcess | None:
        """The member the others follow (None while they agree on none)."""
        views = {m.name: m.status() for m in self.members if m.alive}
        ids = {v["member_id"]: name for name, v in views.items() if v is not None}
        leaders = {v["leader"] for v in views.values() if v is not None}
        if len(leaders) != 1 or (leader := leaders.pop()) not in ids:
            return None
        return next(m for m in self.members if m.name == ids[leader])

    def start(self, timeout: float = 30.0) -> None:
        # Together: a member alone waits for a quorum before it answers healthy.
        for member in self.members:
            member.start(wait=False)
        for member in self.members:
            member.wait_healthy(timeout)

    def stop(self) -> None:
        for member in self.members:
            member.stop()

    def kill(self) -> None:
        for member in self.members:
            member.kill()


def pin_listener_ports(listeners: str, ports: dict[str, int]) -> str:
    """``listeners`` with each port-0 entry given the port its listener bound before."""
    pinned = []
    for entry in (e.strip() for e in listeners.split(",") if e.strip()):
        name, _, address = entry.partition("://")
        host, _, port = address.rpartition(":")
        if port == "0" and name.upper() in ports:
            pinned.append(f"{name}://{host}:{ports[name.upper()]}")
        else:
            pinned.append(entry)
    return ",".join(pinned)


class BrokerNode:
    """``partita broker`` as a cluster member; restartable on its data dir and port."""

    def __init__(
        self,
        node_id: int,
        data_dir: Path,
        metadata: str,
        rack: str | None = None,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.node_id = node_id
        self.data_dir = data_dir
        self.metadata = metadata
        self.rack = rack
        self.settings = dict(settings or {})
        self.host = "127.0.0.1"
        self.port = 0
        # Each named listener's port once bound: a restart takes the same ones, as a
        # broker restarted by hand with its server.properties would, so clients and
        # followers holding the old address find it again.
        self.listener_ports: dict[str, int] = {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        # Prepended to the broker's command line (e.g. `ip netns exec NS`, which execs it:
        # the pid stays the broker's and signals reach it).
        self.launcher: list[str] = []

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 60.0, wait: bool = True) -> None:
        ready = self.data_dir.parent / f"{self.data_dir.name}.ready"
        ready.unlink(missing_ok=True)
        args = [
            *self.launcher,
            sys.executable, "-m", "partita.cli.main", "broker",
            "--node-id", str(self.node_id),
            "--data-dir", str(self.data_dir),
            "--listen", self.bootstrap,
            "--metadata", self.metadata,
            "--ready-file", str(ready),
        ]  # fmt: skip
        settings = dict(self.settings)
        if "listeners" in settings and self.listener_ports:
            settings["listeners"] = pin_listener_ports(settings["listeners"], self.listener_ports)
        if self.rack:
            settings["broker.rack"] = self.rack
        if settings:
            # In a file only its owner reads, not on the command line: settings may hold
            # passwords (a listener's JAAS config), and any local user can read argv.
            config = self.data_dir.parent / f"{self.data_dir.name}.properties"
            write_private_properties(config, settings)
            args += ["--config", str(config)]
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        self.proc = subprocess.Popen(args, stdout=log, stderr=log, start_new_session=True)
        if wait:
            self.wait_ready(ready, timeout)

    def wait_ready(self, ready: Path, timeout: float) -> None:
        assert self.proc is not None
        _wait_for(
            self.proc,
            lambda: ready.exists() and bool(ready.read_text().strip()),
            timeout,
            f"broker {self.node_id}",
            self.logs,
        )
        first, *named = ready.read_text().splitlines()
        self.port = int(first.rpartition(":")[2])
        for line in named:
            name, _, address = line.partition(" ")
            self.listener_ports[name] = int(address.rpartition(":")[2])

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM: controlled shutdown, then a clean stop."""
        if not self.alive:
            return self.proc.returncode if self.proc else 0
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9

    def kill(self) -> None:
        if self.alive:
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)  # a paused process dies too
            self.proc.kill()
            self.proc.wait(10)

    def logs(self, lines: int = 40) -> str:
        return _tail(self.log_path, lines)


BROKER_PORT = 9092


class LocalCluster:
    """etcd (unless endpoints are given) and ``brokers`` brokers under ``base``.

    With a ``lab``, broker N runs on a host of its own (``hN``, 10.213.K.N, port 9092)
    and etcd member N (of ``etcd_members``) beside it, the layout of a cluster on
    separate machines: everyone reaches everyone through the addresses they advertise.
    """

    def __init__(
        self,
        base: Path,
        brokers: int = 3,
        racks: list[str] | None = None,
        etcd_endpoints: str | None = None,
        settings: dict[str, str] | None = None,
        prefix: str = "partita",
        client_settings: dict[str, str] | None = None,
        etcd_members: int = 1,
        lab: HostLab | None = None,
    ) -> None:
        self.base = base
        self.lab = lab
        self.hosts: list[Host] = []
        if lab is not None:
            if not etcd_endpoints and etcd_members > brokers:
                raise ValueError(f"{etcd_members} etcd members need as many hosts: {brokers}")
            self.hosts = [lab.add(f"h{n}", n) for n in range(1, brokers + 1)]
        # What a client needs to reach these brokers (a secured cluster's login and CA).
        self.client_settings = dict(client_settings or {})
        # One member (a development cluster), or a quorum of several; none when the
        # endpoints of a running etcd are given.
        self.etcd: EtcdProcess | None = None
        self.etcd_cluster: EtcdCluster | None = None
        if etcd_endpoints:
            endpoints = etcd_endpoints
        elif etcd_members > 1 or self.hosts:
            self.etcd_cluster = EtcdCluster(base, etcd_members, self.hosts[:etcd_members] or None)
            endpoints = self.etcd_cluster.endpoints
        else:
            self.etcd = EtcdProcess(base / "etcd")
            endpoints = self.etcd.endpoint
        self.metadata = f"etcd://{endpoints}/{prefix}"
        self.brokers = [
            BrokerNode(
                node_id,
                base / f"broker-{node_id}",
                self.metadata,
                racks[(node_id - 1) % len(racks)] if racks else None,
                settings,
            )
            for node_id in range(1, brokers + 1)
        ]
        for broker, host in zip(self.brokers, self.hosts, strict=False):
            broker.host, broker.port, broker.launcher = host.address, BROKER_PORT, host.launcher

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers if b.alive)

    def broker(self, node_id: int) -> BrokerNode:
        return self.brokers[node_id - 1]

    def host(self, node_id: int) -> Host:
        """The host broker ``node_id`` runs on (a cluster with a lab)."""
        return self.hosts[node_id - 1]

    def start(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        if self.etcd is not None:
            self.etcd.start()
        if self.etcd_cluster is not None:
            self.etcd_cluster.start()
        # All at once: each waits only for its own recovery and registration.
        for broker in self.brokers:
            broker.start(wait=False)
        for broker in self.brokers:
            broker.wait_ready(broker.data_dir.parent / f"{broker.data_dir.name}.ready", 60)

    def stop(self) -> None:
        for broker in self.brokers:
            if broker.alive:
                broker.signal(signal.SIGTERM)
        for broker in self.brokers:
            broker.stop()
        if self.etcd is not None:
            self.etcd.stop()
        if self.etcd_cluster is not None:
            self.etcd_cluster.stop()

    def kill(self) -> None:
        for broker in self.brokers:
            broker.kill()
        if self.etcd is not None:
            self.etcd.kill()
        if self.etcd_cluster is not None:
            self.etcd_cluster.kill()
