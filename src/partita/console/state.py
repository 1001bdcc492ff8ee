"""What the console's pages share: its settings, the sampler, proposed plans, key
samples, the advisor's lock, and the templates with their filters."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog
from jinja2 import Environment, PackageLoader, select_autoescape

from partita.console import hot_keys
from partita.console.model import Topic
from partita.console.reassign_plans import PlanBook
from partita.console.sampler import Sampler

log = structlog.get_logger("partita.console")

KEY_SAMPLE_MAX_AGE_S = 30.0
EMPTY_SAMPLE_MAX_AGE_S = 2.0


@dataclass
class Settings:
    bootstrap: str
    security: Mapping[str, str] = field(default_factory=dict)
    read_only: bool = False
    interval_s: float = 2.0
    # The host names the console answers to (None: any), against DNS rebinding.
    allowed_hosts: list[str] | None = None


class Console:
    """What the routes share: the sampler, proposed plans, key samples, the advisor."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.sampler = Sampler(settings.bootstrap, dict(settings.security), settings.interval_s)
        self.plans = PlanBook()
        self.key_samples: dict[str, hot_keys.KeySample] = {}
        self.sampling: dict[str, asyncio.Task[None]] = {}
        self.advising = asyncio.Lock()
        self.env = Environment(
            loader=PackageLoader("partita.console", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters["size"] = size_text
        self.env.filters["rate"] = rate_text
        self.env.filters["pct"] = lambda v: f"{100 * v:.1f}%"
        self.env.filters["clock"] = clock

    def render(self, template: str, **context: Any) -> str:
        return self.env.get_template(template).render(
            read_only=self.settings.read_only, bootstrap=self.settings.bootstrap, **context
        )


async def refresh_key_sample(console: Console, topic: Topic) -> None:
    """Start a sample of the topic's keys when its page opens or its stream updates, at
    most every KEY_SAMPLE_MAX_AGE_S, one at a time per topic, in the background: the page
    does not wait for it (at 10,000 partitions the read takes its whole budget); the
    stream shows it when it is there."""
    known = console.key_samples.get(topic.name)
    # An empty sample (the topic was new) is taken again soon; a full one lasts a while.
    max_age = (
        KEY_SAMPLE_MAX_AGE_S if known is not None and known.records else EMPTY_SAMPLE_MAX_AGE_S
    )
    if known is not None and time.time() - known.taken_at < max_age:
        return
    running = console.sampling.get(topic.name)
    if running is not None and not running.done():
        return

    async def take() -> None:
        try:
            console.key_samples[topic.name] = await hot_keys.sample(
                console.settings.bootstrap, dict(console.settings.security), topic
            )
        except Exception as exc:
            log.warning("console.key_sample_failed", topic=topic.name, error=str(exc))

    console.sampling[topic.name] = asyncio.get_running_loop().create_task(take())


def clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def polled(console: Console) -> str:
    sampler = console.sampler
    if sampler.version == 0:
        return "Waiting for the first poll of the cluster…"
    return (
        f"Polled at {clock(sampler.snapshot.taken_at)} (every {sampler.interval_s:g} s; "
        f"the last poll took {sampler.last_poll_s:.2f} s)"
    )


def size_text(value: int | None) -> str:
    if value is None:
        return "-"
    size = float(value)
    if size < 1024:
        return f"{size:.0f} B"
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024 or unit == "GiB":
            break
    return f"{size:.1f} {unit}"


def rate_text(value: float) -> str:
    if value >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{value:.1f}" if value else "0"
