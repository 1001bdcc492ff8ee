"""Apache Kafka itself, as the reference: real brokers and Kafka's CLI tools, run from Java.

The jars come from ``scripts/kafka_jars.sh`` (Maven, cached in ``var/kafka-jars``); when
they are missing the first use runs that script, and if it cannot fetch them every test
that needs Kafka fails with its reason (:class:`KafkaUnavailableError`), never skips.

* :class:`KafkaCluster` / :func:`real_kafka`: a single Kafka node in KRaft combined mode
  (broker and controller in one process), or several such nodes that are all voters, on
  127.0.0.1 ports picked free at start. Storage is formatted with Kafka's storage tool,
  then each node runs ``kafka.Kafka server.properties``; ready when every node logged that
  it started and accepts connections. SIGTERM stops it (SIGKILL after a grace period).
* :func:`run_tool`: one Kafka CLI tool class (``org.apache.kafka.tools.TopicCommand`` ...)
  in its own JVM against a bootstrap address; returns its exit code and output.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
JARS_ROOT = Path(os.environ.get("PARTITA_KAFKA_JARS", REPO / "var" / "kafka-jars"))
KAFKA_JARS = JARS_ROOT / "kafka"
SPARK_KAFKA_JARS = JARS_ROOT / "spark-kafka"
HERE = Path(__file__).resolve().parent

# The machine has 2 cores and 24 GiB shared with other work: a modest fixed heap per node,
# as Kafka's own scripts set one (they default to 1 GiB), and less for short-lived tools.
BROKER_HEAP = "512m"
TOOL_HEAP = "256m"
# C1 only: the tools run for a second or two, where C2's compiling costs more than it wins.
TOOL_JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto")


# Kafka's default waits 3 s for more members before a new group's first assignment; both
# brokers skip that wait here, so a group test measures the protocol and not the delay.
GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": "0"}


class KafkaUnavailableError(RuntimeError):
    """Kafka's jars or Java are missing: the tests that need Kafka fail with this reason."""


_jars_checked = False


def ensure_jars() -> None:
    """Make sure ``var/kafka-jars`` has Kafka's jars, fetching them once if not."""
    global _jars_checked  # noqa: PLW0603 - one check per test session
    if _jars_checked:
        return
    if shutil.which("java") is None:
        raise KafkaUnavailableError("java is not installed: run scripts/setup.sh (openjdk-17)")
    if not (KAFKA_JARS / ".stamp").exists() and "PARTITA_KAFKA_JARS" not in os.environ:
        result = subprocess.run(
            ["bash", str(REPO / "scripts" / "kafka_jars.sh")],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if not (KAFKA_JARS / ".stamp").exists():
            raise KafkaUnavailableError(
                "Apache Kafka's jars are not in var/kafka-jars and scripts/kafka_jars.sh "
                f"could not fetch them:\n{result.stdout}{result.stderr}"
            )
    if not (KAFKA_JARS / ".stamp").exists():
        error = JARS_ROOT / "ERROR"
        reason = error.read_text() if error.exists() else "run scripts/kafka_jars.sh"
        raise KafkaUnavailableError(f"Apache Kafka's jars are not in {KAFKA_JARS}: {reason}")
    _jars_checked = True


def kafka_version() -> str:
    """The Kafka version of the jars, e.g. ``4.4.0``."""
    ensure_jars()
    for jar in KAFKA_JARS.glob("kafka-clients-*.jar"):
        return jar.name.removeprefix("kafka-clients-").removesuffix(".jar")
    raise KafkaUnavailableError(f"no kafka-clients jar in {KAFKA_JARS}")


def classpath(*extra: Path) -> str:
    ensure_jars()
    return os.pathsep.join([*(str(p) for p in extra), str(KAFKA_JARS / "*")])


def java_command(
    main_class: str, args: Sequence[str], heap: str, log_config: Path, flags: Sequence[str] = ()
) -> list[str]:
    return [
        "java",
        f"-Xmx{heap}",
        *flags,
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log_config}",
        "-cp",
        classpath(),
        main_class,
        *args,
    ]


# --------------------------------------------------------------------------- CLI tools


@dataclass(frozen=True)
class ToolResult:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def check(self) -> ToolResult:
        if self.returncode != 0:
            raise AssertionError(
                f"{' '.join(self.args)} exited {self.returncode}:\n{self.stdout}\n{self.stderr}"
            )
        return self


def run_tool(
    tool: str,
    *args: str,
    bootstrap: str | None = None,
    stdin: str | None = None,
    timeout: float = 120.0,
) -> ToolResult:
    """Run one Kafka CLI tool class and return what it printed.

    ``tool`` is a class name (``org.apache.kafka.tools.TopicCommand``) or a short name from
    :data:`TOOLS` (``topics``). With ``bootstrap``, ``--bootstrap-server`` comes first.
    The tool's logging goes to stderr at WARN, as with Kafka's ``bin/`` scripts.
    """
    main_class = TOOLS.get(tool, tool)
    argv = ([f"--bootstrap-server={bootstrap}"] if bootstrap is not None else []) + list(args)
    command = java_command(main_class, argv, TOOL_HEAP, HERE / "log4j2-tools.properties")
    command[1:1] = TOOL_JVM_FLAGS
    result = subprocess.run(
        command,
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return ToolResult((tool, *argv), result.returncode, result.stdout, result.stderr)


TOOLS = {
    "topics": "org.apache.kafka.tools.TopicCommand",
    "console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "configs": "org.apache.kafka.tools.ConfigCommand",
    "delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "acls": "org.apache.kafka.tools.AclCommand",
    "metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "storage": "kafka.tools.StorageTool",
    "transactions": "org.apache.kafka.tools.TransactionsCommand",
}


@dataclass(frozen=True)
class JavaProgram:
    """``tests/kafka/java/ClientCheck.java``, compiled against Kafka's client jars."""

    classes: Path

    def run(
        self, *args: str, timeout: float = 120.0, config: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``config``: a properties file of client settings every client of it takes."""
        return subprocess.run(
            [
                "java",
                "-Xmx256m",
                "-XX:TieredStopAtLevel=1",
                f"-Dlog4j2.configurationFile={HERE / 'log4j2-tools.properties'}",
                "-cp",
                classpath(self.classes),
                "ClientCheck",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={**os.environ, "CLIENT_CHECK_CONFIG": str(config) if config else ""},
        )


# --------------------------------------------------------------------------- brokers


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports the kernel just gave out on 127.0.0.1 (then released)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


def random_cluster_id() -> str:
    """A cluster id as Kafka writes them: 16 random bytes, URL-safe base64, unpadded.

    Never one starting with '-', which the storage tool's argument parser takes for an
    option (Kafka's own Uuid.randomUuid draws again in that case too).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


@dataclass
class KafkaNode:
    node_id: int
    port: int
    controller_port: int
    directory: Path
    proc: subprocess.Popen[bytes] | None = None
    log_mark: int = 0  # where this run's lines start in server.log (a restart appends)
    # Listeners besides PLAINTEXT (name -> port), e.g. SSL and SASL_SSL for benchmarks.
    extra_ports: dict[str, int] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def started(self) -> bool:
        """This run logged that it started: it joined the quorum and serves."""
        if not self.log_path.exists():
            return False
        with open(self.log_path, "rb") as log:
            log.seek(self.log_mark)
            return b"Kafka Server started" in log.read()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class KafkaCluster:
    """Real Kafka on loopback: ``nodes`` KRaft nodes, each broker and controller (voter)."""

    def __init__(
        self,
        workdir: Path,
        nodes: int = 1,
        settings: Mapping[str, str] | None = None,
        heap: str = BROKER_HEAP,
        first_node_id: int = 1,
        extra_listeners: Mapping[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        # More listeners, name -> security protocol; their ssl.*/sasl.* go in settings.
        self.extra_listeners = dict(extra_listeners or {})
        self.first_node_id = first_node_id
        self.size = nodes
        self.settings = dict(settings or {})
        self.heap = heap
        self.cluster_id = random_cluster_id()
        self.nodes: list[KafkaNode] = []

    @property
    def bootstrap(self) -> str:
        return ",".join(node.address for node in self.nodes)

    def _properties(self, node: KafkaNode, voters: str) -> dict[str, str]:
        replication = str(min(self.size, 3))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(node.directory / "data"),
            "offsets.topic.replication.factor": replication,
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": replication,
            "share.coordinator.state.topic.min.isr": "1",
            # tests start consumers at once; Kafka's default waits 3 s for more to join
            "group.initial.rebalance.delay.ms": "0",
        }
        for name, protocol in self.extra_listeners.items():
            address = f"{name}://127.0.0.1:{node.extra_ports[name]}"
            props["listeners"] += f",{address}"
            props["advertised.listeners"] += f",{address}"
            props["listener.security.protocol.map"] += f",{name}:{protocol}"
        props.update(self.settings)
        return props

    def start(self, timeout: float = 120.0) -> None:
        ensure_jars()
        per_node = 2 + len(self.extra_listeners)
        ports = free_ports(per_node * self.size)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.nodes = [
            KafkaNode(
                self.first_node_id + i,
                ports[per_node * i],
                ports[per_node * i + 1],
                self.workdir / f"kafka-{self.first_node_id + i}",
                extra_ports=dict(
                    zip(
                        self.extra_listeners,
                        ports[per_node * i + 2 : per_node * (i + 1)],
                        strict=True,
                    )
                ),
            )
            for i in range(self.size)
        ]
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        log_config = HERE / "log4j2-broker.properties"
        for node in self.nodes:
            if node.directory.exists():
                shutil.rmtree(node.directory)
            node.directory.mkdir(parents=True)
            props = self._properties(node, voters)
            node.config_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        with ThreadPoolExecutor(self.size) as pool:  # one JVM each, at once
            list(pool.map(self._format, self.nodes))
        for node in self.nodes:
            self._launch(node, log_config)
        self.wait_ready(timeout)

    def _format(self, node: KafkaNode) -> None:
        """Kafka's storage tool writes meta.properties and the bootstrap metadata."""
        fmt = subprocess.run(
            java_command(
                "kafka.tools.StorageTool",
                ["format", "-t", self.cluster_id, "-c", str(node.config_path)],
                TOOL_HEAP,
                HERE / "log4j2-tools.properties",
                TOOL_JVM_FLAGS,
            ),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if fmt.returncode != 0:
            raise RuntimeError(f"formatting {node.directory} failed:\n{fmt.stdout}{fmt.stderr}")

    def _launch(self, node: KafkaNode, log_config: Path) -> None:
        node.log_mark = node.log_path.stat().st_size if node.log_path.exists() else 0
        with open(node.log_path, "ab") as log:
            node.proc = subprocess.Popen(
                java_command(
                    "kafka.Kafka",
                    [str(node.config_path)],
                    self.heap,
                    log_config,
                    (f"-Xms{self.heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"),
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=node.directory,
            )

    def wait_ready(self, timeout: float = 120.0, nodes: Sequence[KafkaNode] | None = None) -> None:
        """Until each node logged that it started (joined the quorum) and accepts."""
        deadline = time.monotonic() + timeout
        for node in nodes if nodes is not None else self.nodes:
            while True:
                if node.proc is None or node.proc.poll() is not None:
                    code = node.proc.returncode if node.proc is not None else None
                    raise RuntimeError(
                        f"Kafka node {node.node_id} exited with {code}:\n{node.logs()[-6000:]}"
                    )
                if node.started() and _accepts(node.port):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"Kafka node {node.node_id} not ready after {timeout}s:\n"
                        f"{node.logs()[-6000:]}"
                    )
                time.sleep(0.1)

    def stop_node(self, node: KafkaNode, timeout: float = 30.0) -> None:
        if node.proc is None or node.proc.poll() is not None:
            return
        node.proc.send_signal(signal.SIGTERM)
        try:
            node.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            node.proc.kill()
            node.proc.wait(10)

    def kill_node(self, node: KafkaNode) -> None:
        if node.proc is not None and node.proc.poll() is None:
            node.proc.kill()
            node.proc.wait(10)

    def restart_node(self, node: KafkaNode, timeout: float = 120.0) -> None:
        self.stop_node(node)
        self._launch(node, HERE / "log4j2-broker.properties")
        self.wait_ready(timeout, [node])

    def stop(self, timeout: float = 30.0) -> None:
        # SIGTERM to all first: a controller quorum shuts down faster together
        for node in self.nodes:
            if node.running():
                assert node.proc is not None
                node.proc.send_signal(signal.SIGTERM)
        for node in self.nodes:
            if node.proc is not None:
                try:
                    node.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.kill_node(node)

    def logs(self) -> str:
        return "\n".join(f"--- node {n.node_id}\n{n.logs()}" for n in self.nodes)


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def real_kafka(
    workdir: Path,
    nodes: int = 1,
    settings: Mapping[str, str] | None = None,
    first_node_id: int = 1,
) -> Iterator[KafkaCluster]:
    """A running Kafka (``nodes`` KRaft voters, each also a broker), stopped on exit.

    Node ids run from ``first_node_id`` (0 matches a lone partita broker's id).

    Ports are picked free just before start; should another process take one in between,
    the start is tried once more on new ports.
    """
    cluster = KafkaCluster(workdir, nodes, settings, first_node_id=first_node_id)
    try:
        try:
            cluster.start()
        except RuntimeError as error:
            if "Address already in use" not in str(error):
                raise
            cluster.stop()
            cluster = KafkaCluster(workdir, nodes, settings, first_node_id=first_node_id)
            cluster.start()
        yield cluster
    finally:
        cluster.stop()
