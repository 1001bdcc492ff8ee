"""The broker starts, answers kcat, restarts cleanly, and stops with exit code 0."""

from __future__ import annotations

import subprocess

from tests.integration.conftest import BrokerProcess


def kcat(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kcat", *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


def test_kcat_produce_consume_and_clean_stop(broker: BrokerProcess) -> None:
    result = kcat("-b", broker.bootstrap, "-P", "-t", "smoke", "-K:", stdin="k1:v1\nk2:v2\n")
    assert result.returncode == 0, result.stderr
    out = kcat("-b", broker.bootstrap, "-C", "-t", "smoke", "-e", "-f", "%k=%s@%o\n")
    assert out.stdout.splitlines() == ["k1=v1@0", "k2=v2@1"]
    assert broker.stop() == 0
    assert "broker stopped cleanly" in broker.logs()
    broker.start()
    out = kcat("-b", broker.bootstrap, "-C", "-t", "smoke", "-e", "-f", "%k=%s@%o\n")
    assert out.stdout.splitlines() == ["k1=v1@0", "k2=v2@1"]
