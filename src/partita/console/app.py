"""The console's web application: pages rendered on the server, kept live by one
server-sent event stream per page.

Every page is a shell (``base.html``) around a *live part*: a template rendered from the
sampler's newest snapshot. The page's stream (``/stream?view=...``) sends that part again
each time a poll finishes; the browser's only script swaps it in. Templates are
autoescaped: a group id, client id, key or config value is text, never markup.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib import resources
from typing import Any
from urllib.parse import urlencode

import structlog
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from partita.client.admin import PartitionDescription, TopicDescription
from partita.client.partition_layout import broker_lines
from partita.console import advisor, charts, hot_keys
from partita.console.history import trend
from partita.console.model import (
    Snapshot,
    Topic,
    broker_loads,
    grid_columns,
    leader_spread,
    shares,
)
from partita.console.reassign_plans import PlanBook, PlanError
from partita.console.sampler import Sampler

log = structlog.get_logger("partita.console")

GRID_PER_PAGE = 120
ROWS_PER_PAGE = 200
KEY_SAMPLE_MAX_AGE_S = 30.0
EMPTY_SAMPLE_MAX_AGE_S = 2.0
STREAM_PING_S = 15.0


@dataclass
class Settings:
    bootstrap: str
    security: Mapping[str, str] = field(default_factory=dict)
    read_only: bool = False
    interval_s: float = 2.0


class Console:
    """What the routes share: the sampler, proposed plans, key samples, the advisor."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.sampler = Sampler(settings.bootstrap, dict(settings.security), settings.interval_s)
        self.plans = PlanBook()
        self.key_samples: dict[str, hot_keys.KeySample] = {}
        self.advising = asyncio.Lock()
        self.env = Environment(
            loader=PackageLoader("partita.console", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters["size"] = _size
        self.env.filters["rate"] = _rate
        self.env.filters["pct"] = lambda v: f"{100 * v:.1f}%"
        self.env.filters["clock"] = _clock

    def render(self, template: str, **context: Any) -> str:
        return self.env.get_template(template).render(
            read_only=self.settings.read_only, bootstrap=self.settings.bootstrap, **context
        )


# -- the live part of each page: a template and its context, from the newest snapshot --

View = Callable[[Console, Mapping[str, str]], tuple[str, dict[str, Any]]]


def _page(params: Mapping[str, str]) -> int:
    try:
        return max(1, int(params.get("page", "1")))
    except ValueError:
        return 1


def cluster_view(console: Console, params: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    snap = console.sampler.snapshot
    chosen_topic = params.get("topic", "")
    topic = snap.topic(chosen_topic) if chosen_topic else None
    topics = (topic,) if topic is not None else snap.user_topics
    loads = broker_loads(snap, topics)
    alive = {b.node_id for b in snap.brokers}
    columns, pages = grid_columns(topics, _page(params), GRID_PER_PAGE)
    return "cluster_live.html", {
        "snap": snap,
        "loads": loads,
        "spread": leader_spread(loads, alive),
        "columns": columns,
        "pages": pages,
        "page": min(_page(params), pages),
        "topic_filter": chosen_topic,
        "missing_topic": bool(chosen_topic) and topic is None,
        "brokers": snap.broker_ids,
        "alive": alive,
        # The seeds' picture, in words, for one topic small enough to read that way.
        "seeds_lines": _seeds_lines(snap, topic) if topic is not None else [],
        "troubled": [
            p for t in snap.user_topics for p in t.partitions if p.offline or p.under_replicated
        ][:50],
    }


def topics_view(console: Console, params: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    snap = console.sampler.snapshot
    every = snap.topics
    pages = max(1, -(-len(every) // ROWS_PER_PAGE))
    page = min(_page(params), pages)
    rows = []
    for t in every[(page - 1) * ROWS_PER_PAGE : page * ROWS_PER_PAGE]:
        rates = console.sampler.history.rates(t.name)
        rows.append(
            (
                t,
                sum(r for r, _b in rates.values()),
                sum(b for _r, b in rates.values()),
                any(s.hot for s in shares(t)),
            )
        )
    return "topics_live.html", {"snap": snap, "rows": rows, "page": page, "pages": pages}


def topic_view(console: Console, params: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    snap = console.sampler.snapshot
    name = params.get("name", "")
    topic = snap.topic(name)
    context: dict[str, Any] = {"snap": snap, "name": name, "topic": topic}
    if topic is None:
        return "topic_live.html", context
    rates = console.sampler.history.rates(name)
    record_rates = {p: r for p, (r, _b) in rates.items()}
    every = list(topic.partitions)
    pages = max(1, -(-len(every) // ROWS_PER_PAGE))
    page = min(_page(params), pages)
    shown = every[(page - 1) * ROWS_PER_PAGE : page * ROWS_PER_PAGE]
    topic_shares = {s.partition: s for s in shares(topic, record_rates)}
    context.update(
        page=page,
        pages=pages,
        partitions=shown,
        rates=rates,
        shares=topic_shares,
        hot=[s for s in topic_shares.values() if s.hot],
        keys=console.key_samples.get(name),
        remedies=hot_keys.REMEDIES,
        rate_chart=charts.bars(
            "records/s per partition",
            [str(p.partition) for p in shown],
            [round(rates.get(p.partition, (0.0, 0.0))[0], 1) for p in shown],
        ),
        share_chart=charts.bars(
            "share of the topic's records (%)",
            [str(p.partition) for p in shown],
            [round(100 * topic_shares[p.partition].record_share, 1) for p in shown],
        ),
    )
    return "topic_live.html", context


def groups_view(console: Console, params: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    snap = console.sampler.snapshot
    history = console.sampler.history
    rows = [(g, trend(history.lag_series(g.group_id))) for g in snap.groups]
    return "groups_live.html", {"snap": snap, "rows": rows}


def group_view(console: Console, params: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    snap = console.sampler.snapshot
    group_id = params.get("id", "")
    group = snap.group(group_id)
    series = console.sampler.history.lag_series(group_id)
    return "group_live.html", {
        "snap": snap,
        "group_id": group_id,
        "group": group,
        "trend": trend(series),
        "partition_trends": {
            (p.topic, p.partition): trend(
                console.sampler.history.partition_lag_series(group_id, p.topic, p.partition)
            )
            for p in (group.partitions if group is not None else ())
        },
        "lag_chart": charts.line("lag (records) over the last minutes", [float(v) for v in series])
        if len(series) > 1
        else None,
    }


def reassign_view(console: Console, params: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    snap = console.sampler.snapshot
    plan = None
    error = None
    token = params.get("token")
    if token:
        try:
            plan = console.plans.get(token)
        except PlanError as exc:
            error = str(exc)
    progress = []
    if plan is not None and plan.started_at is not None:
        for tp in plan.changed:
            topic = snap.topic(tp[0])
            now = (
                next((p for p in topic.partitions if p.partition == tp[1]), None) if topic else None
            )
            moving = tp in snap.reassignments
            done = now is not None and not moving and list(now.replicas) == plan.planned[tp]
            progress.append((tp, plan.planned[tp], now, moving, done))
    return "reassign_live.html", {
        "snap": snap,
        "plan": plan,
        "plan_error": error,
        "progress": progress,
        "finished": bool(progress) and all(done for *_rest, done in progress),
        "done_count": sum(1 for *_rest, done in progress if done),
        "in_progress": sorted(snap.reassignments.items()),
    }


VIEWS: dict[str, View] = {
    "cluster": cluster_view,
    "topics": topics_view,
    "topic": topic_view,
    "groups": groups_view,
    "group": group_view,
    "reassign": reassign_view,
}


def _page_response(
    console: Console, request: Request, view: str, title: str, **extra: Any
) -> HTMLResponse:
    params = dict(request.query_params)
    params.pop("seen", None)
    live, context = VIEWS[view](console, params)
    fragment = console.render(live, **context)
    # The stream is told what the page already shows, so its first event is not a copy
    # of it (swapping identical content would still replace the elements under a click).
    stream = "/stream?" + urlencode({"view": view, **params, "seen": _digest(fragment)})
    return HTMLResponse(
        console.render(
            "page.html",
            title=title,
            nav=view,
            live_html=Markup(fragment),
            stream=stream,
            polled=_polled(console),
            **extra,
        )
    )


SEEDS_LINES_MAX_PARTITIONS = 32


def _seeds_lines(snap: Snapshot, topic: Topic) -> list[str]:
    """``Broker 1: P0-Leader | P1-Follower``, one line per broker, as partition_layout
    prints it for ``partita cluster describe``."""
    if len(topic.partitions) > SEEDS_LINES_MAX_PARTITIONS:
        return []
    described = [
        TopicDescription(
            topic.name,
            "",
            topic.internal,
            [
                PartitionDescription(p.partition, p.leader, -1, list(p.replicas), list(p.isr), 0)
                for p in topic.partitions
            ],
        )
    ]
    return broker_lines(snap.broker_ids, described, with_topic=False, down=snap.dead_brokers)


def _digest(fragment: str) -> str:
    return hashlib.blake2b(fragment.encode(), digest_size=8).hexdigest()


# -- routes ----------------------------------------------------------------------------


def create_app(settings: Settings) -> Starlette:
    console = Console(settings)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        console.sampler.start()
        try:
            yield
        finally:
            await console.sampler.stop()

    async def home(_request: Request) -> Response:
        return RedirectResponse("/cluster", status_code=303)

    async def cluster_page(request: Request) -> Response:
        return _page_response(console, request, "cluster", "Cluster")

    async def topics_page(request: Request) -> Response:
        return _page_response(console, request, "topics", "Topics")

    async def topic_page(request: Request) -> Response:
        name = request.query_params.get("name", "")
        topic = console.sampler.snapshot.topic(name)
        if topic is not None:
            await _refresh_key_sample(console, topic)
        return _page_response(console, request, "topic", f"Topic {name}")

    async def groups_page(request: Request) -> Response:
        return _page_response(console, request, "groups", "Consumer groups")

    async def group_page(request: Request) -> Response:
        return _page_response(
            console, request, "group", f"Group {request.query_params.get('id', '')}"
        )

    async def reassign_page(request: Request) -> Response:
        return _page_response(console, request, "reassign", "Reassignment")

    async def reassign_plan(request: Request) -> Response:
        form = await request.form()
        snap = console.sampler.snapshot
        try:
            brokers = sorted({int(str(b)) for b in form.getlist("broker")})
            extra = [int(b) for b in str(form.get("add", "")).replace(",", " ").split()]
        except ValueError:
            return _message(console, "Reassignment", "Broker ids are whole numbers.", 400)
        brokers = sorted(set(brokers) | set(extra))
        if not brokers:
            return _message(
                console, "Reassignment", "Choose at least one broker to place replicas on.", 400
            )
        chosen = {str(t) for t in form.getlist("topic")} - {""}
        topics = [t for t in snap.user_topics if not chosen or t.name in chosen]
        unknown = chosen - {t.name for t in topics}
        if unknown:
            return _message(
                console, "Reassignment", f"No such topic: {', '.join(sorted(unknown))}.", 400
            )
        current = {(t.name, p.partition): list(p.replicas) for t in topics for p in t.partitions}
        sizes = {(t.name, p.partition): p.leader_size for t in topics for p in t.partitions}
        racks = {b.node_id: b.rack for b in snap.brokers}
        try:
            plan = console.plans.propose(current, brokers, racks, sizes)
        except ValueError as exc:
            return _message(console, "Reassignment", f"No plan: {exc}.", 400)
        return RedirectResponse(f"/reassign?{urlencode({'token': plan.token})}", status_code=303)

    async def reassign_execute(request: Request) -> Response:
        form = await request.form()
        token = str(form.get("token", ""))
        if settings.read_only:
            return _message(
                console, "Reassignment", "This console is read-only: it executes nothing.", 403
            )
        snap = console.sampler.snapshot
        try:
            plan = console.plans.get(token)
            busy = sorted(set(plan.targets) & set(snap.reassignments))
            if busy and plan.started_at is None:
                raise PlanError(
                    f"{len(busy)} of these partitions are being moved already (e.g. "
                    f"{busy[0][0]}-{busy[0][1]}): wait for that to finish, then plan again"
                )
            plan = console.plans.claim(token, time.time())
        except PlanError as exc:
            return _message(
                console,
                "Reassignment",
                str(exc),
                409,
                link=f"/reassign?{urlencode({'token': token})}",
            )
        if plan.targets:
            try:
                plan.results = await console.sampler.admin.alter_partition_reassignments(
                    {tp: list(r) for tp, r in plan.targets.items()}
                )
            except Exception as exc:
                log.warning("console.reassign_failed", error=str(exc))
                plan.results = {tp: (-1, str(exc)) for tp in plan.targets}
        log.info("console.reassign_started", token=token, partitions=len(plan.targets))
        await console.sampler.poll_now()
        return RedirectResponse(f"/reassign?{urlencode({'token': token})}", status_code=303)

    async def sizing_page(request: Request) -> Response:
        return HTMLResponse(
            console.render(
                "sizing.html", title="Sizing", nav="sizing", advice=None, error=None, form={}
            )
        )

    async def sizing_run(request: Request) -> Response:
        form = await request.form()
        values = {k: str(v) for k, v in form.items()}
        if settings.read_only:
            return _message(
                console,
                "Sizing",
                "This console is read-only: the advisor writes a scratch topic, so it does "
                "not run here.",
                403,
            )
        try:
            target = float(values.get("target", ""))
            record_size = int(values.get("record_size", "1024"))
            seconds = float(values.get("seconds", str(advisor.DEFAULT_SECONDS)))
            if not 0.5 <= seconds <= 60:
                raise ValueError("the run lasts 0.5 to 60 seconds")
            acks = values.get("acks", "all")
            if acks not in ("0", "1", "all", "-1"):
                raise ValueError("acks is 0, 1 or all")
            if not 0 < target < 1e6 or not 0 < record_size <= 10_000_000:
                raise ValueError("the target is a positive MB/s, the record size 1 B to 10 MB")
        except ValueError as exc:
            return HTMLResponse(
                console.render(
                    "sizing.html",
                    title="Sizing",
                    nav="sizing",
                    advice=None,
                    error=str(exc),
                    form=values,
                ),
                status_code=400,
            )
        if console.advising.locked():
            return HTMLResponse(
                console.render(
                    "sizing.html",
                    title="Sizing",
                    nav="sizing",
                    advice=None,
                    error="A measurement is running already; try again when it is done.",
                    form=values,
                ),
                status_code=409,
            )
        async with console.advising:
            try:
                measurement, brokers = await advisor.measure(
                    settings.bootstrap, dict(settings.security), record_size, acks, seconds
                )
                advice = advisor.advise(target, measurement, brokers)
            except Exception as exc:
                log.warning("console.advise_failed", error=str(exc))
                return HTMLResponse(
                    console.render(
                        "sizing.html",
                        title="Sizing",
                        nav="sizing",
                        advice=None,
                        error=f"The measurement failed: {exc}",
                        form=values,
                    ),
                    status_code=502,
                )
        return HTMLResponse(
            console.render(
                "sizing.html", title="Sizing", nav="sizing", advice=advice, error=None, form=values
            )
        )

    async def stream(request: Request) -> Response:
        params = dict(request.query_params)
        view = VIEWS.get(params.pop("view", ""))
        seen = params.pop("seen", "")
        if view is None:
            raise HTTPException(404, "no such view")

        async def events() -> AsyncIterator[dict[str, str]]:
            # The live part is sent when it changed, not every poll: an idle cluster's
            # pages stay still (a button is not replaced under the pointer) and cost
            # nothing but the poll time ("tick").
            version = console.sampler.version
            last = seen
            while True:
                version = await console.sampler.wait_newer(version, STREAM_PING_S)
                if view is topic_view:
                    topic = console.sampler.snapshot.topic(params.get("name", ""))
                    if topic is not None:
                        await _refresh_key_sample(console, topic)
                live, context = view(console, params)
                fragment = console.render(live, **context)
                digest = _digest(fragment)
                if digest != last:
                    last = digest
                    yield {"event": "update", "data": fragment}
                yield {"event": "tick", "data": _polled(console)}

        return EventSourceResponse(events(), ping=int(STREAM_PING_S))

    async def healthz(_request: Request) -> Response:
        snap = console.sampler.snapshot
        return PlainTextResponse(
            f"polls {console.sampler.version} requests {console.sampler.requests_sent} "
            f"last_poll_s {console.sampler.last_poll_s:.3f} error {snap.error or '-'}\n"
        )

    async def not_found(request: Request, exc: Exception) -> Response:
        detail = exc.detail if isinstance(exc, HTTPException) else "not found"
        return _message(console, "Not found", f"{request.url.path}: {detail}", 404)

    async def server_error(request: Request, exc: Exception) -> Response:
        # Never a stack trace in the page: the log has it, the page says what to do.
        log.exception("console.page_failed", path=request.url.path, error=str(exc))
        return _message(
            console,
            "Error",
            f"This page could not be drawn ({type(exc).__name__}: {exc}). The console's "
            "log has the details; reload to try again.",
            500,
        )

    static = resources.files("partita.console") / "static"
    routes = [
        Route("/", home),
        Route("/cluster", cluster_page),
        Route("/topics", topics_page),
        Route("/topic", topic_page),
        Route("/groups", groups_page),
        Route("/group", group_page),
        Route("/reassign", reassign_page),
        Route("/reassign/plan", reassign_plan, methods=["POST"]),
        Route("/reassign/execute", reassign_execute, methods=["POST"]),
        Route("/sizing", sizing_page),
        Route("/sizing", sizing_run, methods=["POST"]),
        Route("/stream", stream),
        Route("/healthz", healthz),
        Mount("/static", StaticFiles(directory=str(static)), name="static"),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            404: not_found,
            405: not_found,
            500: server_error,
            Exception: server_error,
        },
    )
    app.state.console = console
    return app


async def _refresh_key_sample(console: Console, topic: Topic) -> None:
    """Sample the topic's keys when its page opens or its stream updates, at most every
    KEY_SAMPLE_MAX_AGE_S (shared by every open page of the topic)."""
    known = console.key_samples.get(topic.name)
    # An empty sample (the topic was new) is taken again soon; a full one lasts a while.
    max_age = (
        KEY_SAMPLE_MAX_AGE_S if known is not None and known.records else EMPTY_SAMPLE_MAX_AGE_S
    )
    if known is not None and time.time() - known.taken_at < max_age:
        return
    try:
        console.key_samples[topic.name] = await hot_keys.sample(
            console.settings.bootstrap, dict(console.settings.security), topic
        )
    except Exception as exc:
        log.warning("console.key_sample_failed", topic=topic.name, error=str(exc))


def _message(
    console: Console, title: str, text: str, status: int, link: str | None = None
) -> HTMLResponse:
    return HTMLResponse(
        console.render("message.html", title=title, nav="", text=text, link=link),
        status_code=status,
    )


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def _polled(console: Console) -> str:
    sampler = console.sampler
    if sampler.version == 0:
        return "Waiting for the first poll of the cluster…"
    return (
        f"Polled at {_clock(sampler.snapshot.taken_at)} (every {sampler.interval_s:g} s; "
        f"the last poll took {sampler.last_poll_s:.2f} s)"
    )


def _size(value: int | None) -> str:
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def _rate(value: float) -> str:
    if value >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{value:.1f}" if value else "0"
