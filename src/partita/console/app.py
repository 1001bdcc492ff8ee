"""The console's web application: pages rendered on the server, kept live by one
server-sent event stream per page.

Every page is a shell (``base.html``) around a *live part* (``views``): a template
rendered from the sampler's newest snapshot. The page's stream (``/stream?view=...``)
renders it after each poll and sends it when it changed ("update"), else only the poll
time ("tick"); the browser's only script swaps it in. Templates are autoescaped: a group
id, client id or key is text, never markup.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any
from urllib.parse import urlencode

import structlog
from markupsafe import Markup
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from partita.console import advisor
from partita.console.reassign_plans import PlanError
from partita.console.same_origin import SameOriginWrites
from partita.console.state import Console, Settings, polled, refresh_key_sample
from partita.console.views import VIEWS, topic_view

log = structlog.get_logger("partita.console")

STREAM_PING_S = 15.0


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
            polled=polled(console),
            **extra,
        )
    )


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
            for task in console.sampling.values():
                task.cancel()
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
            await refresh_key_sample(console, topic)
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
            replicas = {
                (t.name, p.partition): list(p.replicas) for t in snap.topics for p in t.partitions
            }
            plan = console.plans.claim(token, time.time(), replicas, set(snap.reassignments))
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

    def sizing(
        form: dict[str, str],
        advice: advisor.Advice | None = None,
        error: str | None = None,
        status: int = 200,
    ) -> HTMLResponse:
        page = console.render(
            "sizing.html", title="Sizing", nav="sizing", advice=advice, error=error, form=form
        )
        return HTMLResponse(page, status_code=status)

    async def sizing_page(_request: Request) -> Response:
        return sizing({})

    async def sizing_run(request: Request) -> Response:
        values = {k: str(v) for k, v in (await request.form()).items()}
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
            acks = values.get("acks", "all")
            if not 0.5 <= seconds <= 60:
                raise ValueError("the run lasts 0.5 to 60 seconds")
            if acks not in ("0", "1", "all", "-1"):
                raise ValueError("acks is 0, 1 or all")
            if not 0 < target < 1e6 or not 0 < record_size <= advisor.MAX_RECORD_SIZE:
                raise ValueError("the target is a positive MB/s, the record size 1 B to 1 MB")
        except ValueError as exc:
            return sizing(values, error=str(exc), status=400)
        if console.advising.locked():
            busy = "A measurement is running already; try again when it is done."
            return sizing(values, error=busy, status=409)
        async with console.advising:
            try:
                measurement, brokers = await advisor.measure(
                    settings.bootstrap, dict(settings.security), record_size, acks, seconds
                )
                advice = advisor.advise(target, measurement, brokers)
            except Exception as exc:
                log.warning("console.advise_failed", error=str(exc))
                return sizing(values, error=f"The measurement failed: {exc}", status=502)
        return sizing(values, advice=advice)

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
                        await refresh_key_sample(console, topic)
                live, context = view(console, params)
                fragment = console.render(live, **context)
                digest = _digest(fragment)
                if digest != last:
                    last = digest
                    yield {"event": "update", "data": fragment}
                yield {"event": "tick", "data": polled(console)}

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
    middleware = [Middleware(SameOriginWrites)]
    if settings.allowed_hosts is not None:
        middleware.insert(
            0, Middleware(TrustedHostMiddleware, allowed_hosts=settings.allowed_hosts)
        )
    app = Starlette(
        routes=routes,
        middleware=middleware,
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


def _message(
    console: Console, title: str, text: str, status: int, link: str | None = None
) -> HTMLResponse:
    return HTMLResponse(
        console.render("message.html", title=title, nav="", text=text, link=link),
        status_code=status,
    )
