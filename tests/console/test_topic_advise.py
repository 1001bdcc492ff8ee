"""``partita topic advise``: measures one partition on the cluster, answers a count that
spreads over the brokers, cleans up its scratch topic; bad input is one line."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import pytest

from partita.client.sync import Admin
from partita.console.advisor import SCRATCH_PREFIX
from partita.local.cluster import LocalCluster

pytestmark = pytest.mark.timeout(180)


def partita(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "partita.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_advise_measures_and_answers_a_multiple_of_the_brokers(
    console_cluster: LocalCluster,
) -> None:
    done = partita("-b", console_cluster.bootstrap, "topic", "advise", "--target-mb-s", "200",
                   "--record-size", "512", "--seconds", "1")  # fmt: skip
    assert done.returncode == 0, done.stderr
    measured = re.search(r"produce ([\d.]+) MB/s, consume ([\d.]+) MB/s", done.stdout)
    assert measured, done.stdout
    answer = re.search(r"(\d+) partitions", done.stdout)
    assert answer, done.stdout
    slower = min(float(measured[1]), float(measured[2]))
    needed = math.ceil(200 / slower)
    # (the figures printed are rounded to 0.1 MB/s: allow the neighbour)
    assert int(answer[1]) % 3 == 0 and int(answer[1]) >= needed - 1
    assert "murmur2" in done.stdout  # the key-order caveat
    with Admin(console_cluster.bootstrap) as admin:
        assert not [t.name for t in admin.describe_topics() if t.name.startswith(SCRATCH_PREFIX)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target-mb-s", "0"], "must be above 0"),
        (["--target-mb-s", "10", "--acks", "2"], "--acks is 0, 1 or all, not '2'"),
        (["--target-mb-s", "10", "-b", "127.0.0.1:1"], "127.0.0.1:1"),
    ],
)
def test_advise_refuses_bad_input_in_one_line(args: list[str], message: str) -> None:
    done = partita("topic", "advise", *args)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
