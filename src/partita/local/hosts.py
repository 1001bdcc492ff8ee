"""Hosts on this machine: network namespaces on a private bridge, one address each.

A cluster whose brokers and etcd members each run in a host of their own reaches every
other member through the addresses it advertises, never through 127.0.0.1, and a host
can be cut off from the others (its broker and its etcd member together) while this
machine's own namespace, where clients usually run, still reaches it. Creating
namespaces needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN).

A lab takes the subnet 10.213.K.0/24 for the first K no live lab holds: the bridge is
``pcKbr`` (10.213.K.254 in this machine's namespace), host N is 10.213.K.N in namespace
``partita-K-NAME``. A lab's owner pid is kept under /run/partita-hosts, so one
left by a killed run is taken down and reused.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

LAB_STATE = Path("/run/partita-hosts")


class HostLabError(RuntimeError):
    """The lab could not be built (not root, no ``ip``, no free subnet)."""


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False, timeout=20)
    if check and result.returncode != 0:
        raise HostLabError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


@dataclass(frozen=True)
class Host:
    name: str
    netns: str
    address: str
    veth: str

    @property
    def launcher(self) -> list[str]:
        """Prepended to a command to run it on this host (``ip netns exec`` execs it:
        the pid stays the command's own, and signals reach it)."""
        return ["ip", "netns", "exec", self.netns]


class HostLab:
    """Hosts on one private bridge; ``isolate`` cuts one off from the others."""

    def __init__(self) -> None:
        if os.geteuid() != 0:
            raise HostLabError("hosts as network namespaces need root (ip netns add)")
        if shutil.which("ip") is None:
            raise HostLabError("`ip` is not installed: apt-get install iproute2")
        LAB_STATE.mkdir(parents=True, exist_ok=True)
        # Once a lab is gone its addresses must not fall through to the default route
        # (a client still retrying would send to the outside network): they are
        # unreachable here unless a lab's bridge (a longer prefix) holds them.
        ip("route", "replace", "unreachable", "10.213.0.0/16")
        self.hosts: dict[str, Host] = {}
        self.isolated: set[str] = set()
        for k in range(256):
            owner = LAB_STATE / f"{k}.pid"
            text = owner.read_text().strip() if owner.exists() else ""
            if text and not _pid_alive(int(text)):
                _take_down(k)  # left by a run that died: its owner is gone
                owner.unlink(missing_ok=True)
            # Creating the bridge is the lock: it fails while another lab holds K (also
            # one that has just made it and not yet written its pid).
            if ip("link", "add", f"pc{k}br", "type", "bridge", check=False).returncode != 0:
                continue
            owner.write_text(str(os.getpid()))
            _take_down(k, keep_bridge=True)  # namespaces a dead run may have left
            self.k = k
            break
        else:
            raise HostLabError("no free subnet for a host lab (10.213.0-255.0/24 all taken)")
        self.bridge = f"pc{self.k}br"
        ip("addr", "add", f"10.213.{self.k}.254/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")

    def add(self, name: str, index: int) -> Host:
        """Host ``name`` at 10.213.K.``index`` (1-253)."""
        host = Host(
            name, f"partita-{self.k}-{name}", f"10.213.{self.k}.{index}",
            f"pc{self.k}v{index}",
        )  # fmt: skip
        ip("netns", "add", host.netns)
        ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0",
           "netns", host.netns)  # fmt: skip
        ip("link", "set", host.veth, "master", self.bridge, "up")
        ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", "eth0")
        ip("-n", host.netns, "link", "set", "eth0", "up")
        ip("-n", host.netns, "link", "set", "lo", "up")
        self.hosts[name] = host
        return host

    def isolate(self, name: str) -> None:
        """Cut ``name`` off from every other host: none routes to it, so neither its
        packets' answers nor their own reach it (to the victim, the others fall silent);
        this machine's own namespace still reaches it."""
        victim = self.hosts[name]
        for other in self.hosts.values():
            if other.name != name:
                ip("-n", other.netns, "route", "replace", "blackhole", f"{victim.address}/32")
        self.isolated.add(name)

    def heal(self, name: str | None = None) -> None:
        """Reconnect ``name`` (every isolated host if None)."""
        for victim_name in [name] if name else list(self.isolated):
            victim = self.hosts[victim_name]
            for other in self.hosts.values():
                if other.name != victim_name:
                    ip("-n", other.netns, "route", "del", "blackhole", f"{victim.address}/32",
                       check=False)  # fmt: skip
            self.isolated.discard(victim_name)

    def close(self) -> None:
        _take_down(self.k)
        (LAB_STATE / f"{self.k}.pid").unlink(missing_ok=True)


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _take_down(k: int, keep_bridge: bool = False) -> None:
    """Remove lab K's namespaces, veths and bridge, whatever is left of them."""
    for line in ip("netns", "list", check=False).stdout.splitlines():
        netns = line.split()[0] if line.strip() else ""
        if netns.startswith(f"partita-{k}-"):
            ip("netns", "del", netns, check=False)
    for line in ip("-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name.startswith(f"pc{k}v") or (name == f"pc{k}br" and not keep_bridge):
            ip("link", "del", name, check=False)
