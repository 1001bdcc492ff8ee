"""The console against a real 3-broker cluster, seen through Debian's headless chromium
driven by Selenium: one cluster, one console process and one browser for the module."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from partita.local.cluster import LocalCluster

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
# Set to a folder (docs/console) to keep the screenshots there too.
SCREENSHOTS_ENV = "PARTITA_SCREENSHOTS"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def until(condition: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except Exception:  # a page mid-swap, an element not there yet
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def console_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("console") / "cluster", 3, ["a", "b", "c"])
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.kill()


class ConsoleServer:
    def __init__(
        self,
        cluster: LocalCluster,
        log: Path,
        options: list[str] | None = None,
        console_options: list[str] | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "partita.cli.main", "-b", cluster.bootstrap, *(options or []),
             "console", "--listen", f"127.0.0.1:{self.port}", "--interval", "0.5",
             *(console_options or [])],
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        until(lambda: "polls" in self.get("/healthz")[1], 30, "the console answers")

    def get(self, path: str) -> tuple[int, str]:
        with urllib.request.urlopen(self.url + path, timeout=10) as answer:
            return answer.status, answer.read().decode()

    def post(self, path: str, form: dict[str, str]) -> tuple[int, str]:
        data = urllib.parse.urlencode(form).encode()
        try:
            with urllib.request.urlopen(self.url + path, data=data, timeout=30) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as refused:
            return refused.code, refused.read().decode()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


@pytest.fixture(scope="module")
def console(
    console_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConsoleServer]:
    server = ConsoleServer(console_cluster, tmp_path_factory.mktemp("console-log") / "console.log")
    try:
        yield server
    finally:
        server.stop()
        print(f"--- console log\n{server.log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.fail("chromium and chromedriver are missing: run scripts/setup.sh")
    from selenium import webdriver  # noqa: PLC0415
    from selenium.webdriver.chrome.service import Service  # noqa: PLC0415

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--window-size=1400,1000", "--no-proxy-server"):  # fmt: skip
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def screenshot(browser: Any, tmp_path: Path) -> Callable[[str], Path]:
    def take(name: str) -> Path:
        path = tmp_path / f"{name}.png"
        browser.save_screenshot(str(path))
        kept = os.environ.get(SCREENSHOTS_ENV)
        if kept:
            Path(kept).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(kept) / path.name)
        return path

    return take
