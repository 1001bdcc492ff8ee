"""`partita cluster up` and `partita cluster describe`, through the real CLI."""

from __future__ import annotations

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
             "--racks", "a,b,c", "--data-dir", str(tmp_path / "c")],
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
