"""Every asset ships in the wheel: the console, installed from it alone, serves its pages
in a network namespace that has nothing but loopback (no CDN could be reached), and no
page names anything outside the console."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(240)

# Run inside the namespace: start the console from the unpacked wheel, fetch its pages.
SERVE_AND_FETCH = textwrap.dedent(
    """
    import re, socket, subprocess, sys, time, urllib.request
    import partita
    try:  # nothing outside the namespace can be reached: no CDN, no registry
        socket.create_connection(("1.1.1.1", 443), timeout=2)
        raise SystemExit("the namespace reaches the outside")
    except OSError:
        pass
    assert partita.__file__.startswith(sys.argv[1]), partita.__file__
    console = subprocess.Popen([sys.executable, "-m", "partita.cli.main", "-b",
                                "127.0.0.1:1", "console", "--listen", "127.0.0.1:8765"])
    try:
        pages = {}
        deadline = time.monotonic() + 60
        for path in ("/cluster", "/topics", "/groups", "/reassign", "/sizing",
                     "/static/console.js", "/static/console.css"):
            while True:
                try:
                    with urllib.request.urlopen("http://127.0.0.1:8765" + path) as answer:
                        pages[path] = (answer.status, answer.read().decode())
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        for path, (status, body) in pages.items():
            assert status == 200, (path, status)
            outside = re.findall(r'(?:src|href)="(?!/|\\?|#)[^"]*"', body)
            assert not outside, (path, outside)
        assert "cannot read the cluster at 127.0.0.1:1" in pages["/cluster"][1]
        print("served", len(pages), "pages")
    finally:
        console.terminate()
    """
)


def test_the_wheel_carries_the_console_and_it_serves_with_no_network(tmp_path: Path) -> None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.fail("unshare and ip (util-linux, iproute2) are needed")
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
        check=True,
        timeout=180,
    )
    (wheel,) = wheels.glob("partita-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for asset in (ROOT / "src/partita/console").glob("*/*"):
        if asset.suffix in (".html", ".css", ".js"):
            assert f"partita/console/{asset.parent.name}/{asset.name}" in names, asset
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    script = tmp_path / "serve.py"
    script.write_text(SERVE_AND_FETCH)
    done = subprocess.run(
        ["unshare", "--net", "sh", "-c",
         f'ip link set lo up && exec "{sys.executable}" "{script}" "{site}"'],
        cwd=tmp_path,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "served 7 pages" in done.stdout
