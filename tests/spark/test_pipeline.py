"""The main job, end to end on a slice of the dataset: broker, produce, Spark batch and
streaming, Parquet and topic outputs, and the report; then the same on a 3-broker cluster
that loses a broker halfway through producing."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from partita.local.cluster import free_port
from tests.spark.spark_standalone import SparkStandalone, stock_worker_python

LIMIT = 20_000
PIPELINE = [sys.executable, "-m", "partita.cli.main", "pipeline"]
SLICE = ["--limit", str(LIMIT), "--max-offsets-per-trigger", "8000"]
RESULT_TABLES = ("carrier_on_time", "route_on_time", "hourly_departures")


@dataclass(frozen=True)
class Run:
    work: Path
    report: str


def _run(work: Path, *extra: str) -> Run:
    done = subprocess.run(
        [*PIPELINE, "--work-dir", str(work), *SLICE, *extra],
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    assert done.returncode == 0, _failure(work, done)
    return Run(work, done.stdout)


def _failure(work: Path, done: subprocess.CompletedProcess[str]) -> str:
    """What a failed run said: its report's end, the start of what it wrote on stderr
    (where Spark's error is, before the plan it dumps) and the brokers' warnings."""
    said = [done.stdout[-3000:], done.stderr[:4000], done.stderr[-2000:]]
    for log in sorted((work / "cluster").glob("broker-*.log")):
        lines = log.read_text(errors="replace").splitlines()
        said += [f"{log.name}:", *[ln for ln in lines if "warn" in ln or "error" in ln][-20:]]
    return "\n".join(said)


def _flat(report: str) -> str:
    """The report with every run of white space made one space: Rich wraps long lines at
    80 columns when it prints to a pipe."""
    return " ".join(report.split())


def _rows(work: Path, table: str) -> list[tuple[object, ...]]:
    rows = pq.read_table(work / "output" / f"{table}.parquet").to_pylist()
    return sorted(tuple(sorted(row.items())) for row in rows)


@pytest.fixture(scope="module")
def single_broker_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    work = tmp_path_factory.mktemp("single") / "pipeline"
    # Leftovers of an earlier run (a checkpoint that would skip everything, stale output)
    # must not change the result: the job starts from a clean work dir.
    stale_checkpoint = work / "checkpoints" / "hourly" / "offsets"
    stale_checkpoint.mkdir(parents=True)
    (stale_checkpoint / "0").write_text('v1\n{}\n{"flights":{"0":999999}}\n')
    (work / "output" / "carrier_on_time.parquet").mkdir(parents=True)
    return _run(work)


@pytest.mark.timeout(900)
def test_pipeline_runs_end_to_end_over_an_earlier_runs_files(single_broker_run: Run) -> None:
    report = single_broker_run.report
    assert "produced to 'flights'" in report and "20,000" in report
    assert "Spark stream read (3 micro-batches)" in report
    assert "skew: the biggest partition holds" in report
    assert "exactly once: the batch read offsets 0..n-1 of every partition" in _flat(report)
    assert "kill -9" not in report and "failover" not in report
    out = single_broker_run.work / "output"
    carriers = pq.read_table(out / "carrier_on_time.parquet").to_pylist()
    assert sum(row["flights"] for row in carriers) == 20_000
    hourly = pq.read_table(out / "hourly_departures.parquet")
    assert hourly.num_rows > 0
    assert 0 < sum(hourly.column("departures").to_pylist()) <= 20_000


def _layouts(report: str) -> list[dict[int, str]]:
    """Each printed per-broker layout, in order: broker id -> its line."""
    layouts: list[dict[int, str]] = []
    previous = 0  # the broker on the line before, 0 when it was no layout line
    for line in report.splitlines():
        match = re.match(r"\s*Broker (\d+): (.*)$", line)
        if not match:
            previous = 0
            continue
        node = int(match.group(1))
        if node <= previous or previous == 0:
            layouts.append({})
        layouts[-1][node] = match.group(2).strip()
        previous = node
    return layouts


@pytest.mark.timeout(900)
def test_pipeline_on_three_brokers_loses_one_and_reads_every_flight_once(
    single_broker_run: Run, tmp_path: Path
) -> None:
    # Secured (#28): brokers reachable only over SASL_SSL, followers logging in to their
    # leaders, ACLs on; the producer and Spark connect as the admin user. Everything
    # below holds as it does in the clear, the results included.
    cluster = _run(tmp_path / "pipeline", "--brokers", "3", "--secure")
    report, flat = cluster.report, _flat(cluster.report)
    assert "secured: SASL_SSL only, ACLs on" in flat

    # The layout: 6 partitions, RF 3 over 3 brokers, each leading 2 and following 4.
    layouts = _layouts(report)
    first, during, last = layouts[0], layouts[1], layouts[-1]
    assert sorted(first) == [1, 2, 3], report[:2000]
    for line in first.values():
        assert line.count("-Leader") == 2 and line.count("-Follower") == 4, line

    # The broker leading the most partitions is killed halfway through producing.
    killed = re.search(r"kill -9 broker (\d) \(leader of (P\d), (P\d)\) with 10,000 of", flat)
    assert killed, flat[:3000]
    victim, led = int(killed.group(1)), {killed.group(2), killed.group(3)}
    assert {f"{p}-Leader" for p in led} <= set(first[victim].split(" | "))

    # Failover: its partitions get new leaders, every ISR loses it, in seconds.
    for partition in led:
        moved = re.search(
            rf"{partition}: leader {victim} -> (\d) after ([\d.]+) s, ISR \[([\d,]+)\] -> "
            r"\[([\d,]+)\]",
            flat,
        )
        assert moved, flat[:3000]
        assert int(moved.group(1)) != victim and 0 < float(moved.group(2)) < 30
        assert str(victim) in moved.group(3) and str(victim) not in moved.group(4)
        assert len(moved.group(4).split(",")) == 2  # min ISR 2: still writable
    assert during[victim].startswith("down")
    gap = re.search(r"waited ([\d.]+) s with no flight acknowledged", flat)
    assert gap and 0 < float(gap.group(1)) < 30, flat

    # Restarted: back in every ISR, and the preferred leaders return.
    assert f"broker {victim} back in every ISR" in flat
    assert "preferred leaders back (ElectLeaders moved" in flat
    assert last == first, (first, last)

    # Every flight read exactly once, by both Spark stages, and the same results.
    assert re.search(r"produced to 'flights' +│ +20,000", report)
    assert re.search(r"Spark batch read \(\d tasks\) +│ +20,000", report)
    assert re.search(r"Spark stream read \(3 micro-batches\) +│ +20,000", report)
    assert "exactly once: the batch read offsets 0..n-1 of every partition" in flat
    fingerprints = re.compile(r"results: (.*?) \(sha256")
    single = fingerprints.search(_flat(single_broker_run.report))
    ours = fingerprints.search(flat)
    assert single and ours and ours.group(1) == single.group(1)
    for table in RESULT_TABLES:
        assert _rows(cluster.work, table) == _rows(single_broker_run.work, table), table

    # The report says what each stage took and what the failover cost.
    assert re.search(r"failover cost: produce [\d.]+s, [\d.]+s of it waiting", flat)
    for stage in ("start cluster", "produce", f"restore broker {victim}", "Spark batch"):
        assert re.search(rf"{stage} [\d.]+s", flat), stage


JVM_STARTUP_CHATTER = (
    "WARNING: Using incubator modules",
    "Using Spark's default log4j profile",
    "Setting default log level",
    "To adjust logging level",
    "NativeCodeLoader",
)


def test_the_pipelines_spark_session_starts_without_jvm_chatter() -> None:
    # The JVM's stderr still reaches ours: what it says after the start, and what it says
    # last, as the job's interpreter exits.
    script = """if True:
        from partita.pipeline.spark_job import spark_session
        session = spark_session()
        assert session.range(5).count() == 5
        session.sparkContext._jvm.System.err.println("the JVM can still speak")
        session.stop()
        session.sparkContext._jvm.System.err.println("even last")
    """
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for chatter in JVM_STARTUP_CHATTER:
        assert chatter not in done.stdout + done.stderr
    assert "the JVM can still speak\n" in done.stderr
    assert "even last\n" in done.stderr


def _same_results(run: Run, single: Run, reused: bool = False) -> None:
    fingerprints = re.compile(r"results: (.*?) \(sha256")
    ours, theirs = fingerprints.search(_flat(run.report)), fingerprints.search(_flat(single.report))
    assert ours and theirs and ours.group(1) == theirs.group(1), _flat(run.report)[-2000:]
    for table in RESULT_TABLES:
        assert _rows(run.work, table) == _rows(single.work, table), table
    span = "b..b+n-1" if reused else "0..n-1"
    assert f"exactly once: the batch read offsets {span} of every partition" in _flat(run.report)


@pytest.mark.timeout(600)
def test_pipeline_on_a_running_partita_cluster(single_broker_run: Run, tmp_path: Path) -> None:
    """--bootstrap-server (#31): the job on a cluster it did not start, here partita's
    (as `partita cluster up` runs it): its topics are made there with replication factor
    3, and a second run is refused because they exist, before anything is written."""
    from partita.local.cluster import LocalCluster  # noqa: PLC0415

    cluster = LocalCluster(tmp_path / "cluster", 3)
    try:
        cluster.start()
        run = _run(tmp_path / "pipeline", "--bootstrap-server", cluster.bootstrap)
        assert (
            "topics flights, flights-report, flights-hourly created with replication factor 3"
            in _flat(run.report)
        )
        _same_results(run, single_broker_run)
        again = subprocess.run(
            [*PIPELINE, "--work-dir", str(tmp_path / "again"), *SLICE, "--bootstrap-server",
             cluster.bootstrap],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert again.returncode == 1
        assert again.stderr.count("\n") == 1, again.stderr
        assert "already exists" in again.stderr and "never deletes" in again.stderr
        assert "--reuse-topics" in again.stderr
        # With --reuse-topics the second run writes after the first's records and reads
        # only its own: the same results, checked exactly once from where each partition
        # ended before it.
        reused = _run(
            tmp_path / "reused", "--bootstrap-server", cluster.bootstrap, "--reuse-topics"
        )
        assert "reusing flights, flights-report, flights-hourly" in _flat(reused.report)
        _same_results(reused, single_broker_run, reused=True)
    finally:
        cluster.kill()


@pytest.mark.kafka
@pytest.mark.timeout(600)
def test_pipeline_on_apache_kafka(single_broker_run: Run, tmp_path: Path) -> None:
    """--bootstrap-server against a 3-node Apache Kafka (KRaft): format("partita") reads
    and writes Kafka's topics, and the results are the same as on partita."""
    from tests.kafka.real_kafka import KafkaCluster, ensure_jars  # noqa: PLC0415

    ensure_jars()
    kafka = KafkaCluster(tmp_path / "kafka", 3)
    try:
        kafka.start()
        run = _run(tmp_path / "pipeline", "--bootstrap-server", kafka.bootstrap)
        assert "3 brokers" in _flat(run.report)
        _same_results(run, single_broker_run)
    finally:
        kafka.stop()


def test_pipeline_says_in_one_line_that_no_broker_answers(tmp_path: Path) -> None:
    done = subprocess.run(
        [*PIPELINE, "--work-dir", str(tmp_path / "w"), "--limit", "10", "--bootstrap-server",
         "127.0.0.1:1"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "cannot use the cluster at 127.0.0.1:1" in done.stderr


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    cluster = SparkStandalone(tmp_path_factory.mktemp("spark-standalone"), workers=2)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.mark.timeout(600)
def test_pipeline_on_a_spark_standalone_cluster_with_stock_workers(
    single_broker_run: Run, spark_cluster: SparkStandalone, tmp_path: Path
) -> None:
    """--spark-master (#31): the Spark stages on a standalone master with two workers whose
    Python has partita's dependencies but not partita: the job ships partita's code, both
    workers run executors, and the results are the local run's."""
    python = stock_worker_python(tmp_path / "stock-python")
    run = _run(
        tmp_path / "pipeline",
        "--spark-master", spark_cluster.master,
        "--worker-python", str(python),
        "--spark-conf", "spark.executor.memory=1g",
    )  # fmt: skip
    assert f"Spark on {spark_cluster.master}: 2 executors, partita shipped" in _flat(run.report)
    _same_results(run, single_broker_run)
    apps = spark_cluster.state()["completedapps"]
    assert isinstance(apps, list) and apps, "the job ran on the cluster"


@pytest.mark.timeout(300)
def test_pipeline_says_what_workers_without_partita_need(
    spark_cluster: SparkStandalone, tmp_path: Path
) -> None:
    python = stock_worker_python(tmp_path / "stock-python")
    done = subprocess.run(
        [*PIPELINE, "--work-dir", str(tmp_path / "w"), *SLICE, "--spark-master",
         spark_cluster.master, "--worker-python", str(python), "--no-ship-package"],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-2000:]
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert "the Spark executors cannot import partita" in line
    assert "drop --no-ship-package" in line and f"{python} -m pip install" in line
    assert "Traceback" not in done.stderr, done.stderr[-3000:]


def test_pipeline_says_in_one_line_that_no_spark_master_answers(tmp_path: Path) -> None:
    port = free_port()
    started = time.monotonic()
    done = subprocess.run(
        [*PIPELINE, "--work-dir", str(tmp_path / "w"), "--limit", "10", "--spark-master",
         f"spark://127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"cannot reach the Spark master at spark://127.0.0.1:{port}" in done.stderr
    assert time.monotonic() - started < 20
    assert not (tmp_path / "w").exists()  # refused before anything was started or wiped


@pytest.mark.timeout(180)
def test_pipeline_says_in_one_line_that_it_may_not_write(tmp_path: Path) -> None:
    """A user who may create the job's topics but not write to them (ACLs on): one line
    naming the refusal, after the topics were made, and no traceback."""
    from confluent_kafka.admin import (  # noqa: PLC0415
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    from tests.integration.conftest import BrokerProcess  # noqa: PLC0415
    from tests.integration.test_acls import SETTINGS  # noqa: PLC0415
    from tests.integration.test_sasl import client_config  # noqa: PLC0415

    broker = BrokerProcess(tmp_path / "data", SETTINGS)
    broker.start()
    try:
        admin = AdminClient(client_config(broker, "admin", "admin-secret"))
        grants = [
            AclBinding(ResourceType.TOPIC, "flights", ResourcePatternType.PREFIXED,
                       "User:alice", "*", operation, AclPermissionType.ALLOW)
            for operation in (AclOperation.CREATE, AclOperation.DESCRIBE)
        ]  # fmt: skip
        for future in admin.create_acls(grants).values():
            future.result(30)
        properties = tmp_path / "alice.properties"
        properties.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
            "sasl.username=alice\nsasl.password=alice-secret\n"
        )
        done = subprocess.run(
            [sys.executable, "-m", "partita.cli.main", "--command-config", str(properties),
             "pipeline", "--work-dir", str(tmp_path / "w"), "--limit", "100",
             "--bootstrap-server", broker.bootstrap],
            capture_output=True, text=True, timeout=150, check=False,
        )  # fmt: skip
        assert done.returncode == 1, done.stdout[-2000:]
        assert "flights, flights-report, flights-hourly created" in _flat(done.stdout)
        assert done.stderr.count("\n") == 1, done.stderr
        assert f"producing to 'flights' on {broker.bootstrap} failed" in done.stderr
        assert "authoriz" in done.stderr.lower() and "alice-secret" not in done.stderr
    finally:
        broker.close()


@pytest.mark.timeout(180)
def test_pipeline_says_in_one_line_that_no_spark_worker_takes_the_job(tmp_path: Path) -> None:
    # A master with no worker: Spark would wait forever ("Initial job has not accepted any
    # resources"); the job waits as long as Spark's own setting says, then one line.
    empty = SparkStandalone(tmp_path / "spark", workers=0)
    empty.start()
    try:
        done = subprocess.run(
            [*PIPELINE, "--work-dir", str(tmp_path / "w"), "--limit", "10", "--spark-master",
             empty.master, "--spark-conf",
             "spark.scheduler.maxRegisteredResourcesWaitingTime=3s"],
            capture_output=True, text=True, timeout=150, check=False,
        )  # fmt: skip
    finally:
        empty.stop()
    assert done.returncode == 1, done.stdout[-2000:]
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert f"no executor started on {empty.master} within 3 s" in line
    assert "Traceback" not in done.stderr
