"""Requests that change the cluster come from the console's own pages only.

The console has no login (it listens on 127.0.0.1 by default, or behind a proxy that
authenticates), so any web page its user opens could otherwise POST to it: start a
reassignment, or make the advisor write to the cluster. A browser says where a request
comes from: ``Sec-Fetch-Site`` (same-origin, or none when typed or bookmarked) and, on a
POST, ``Origin``. A POST that a browser marks as coming from elsewhere is refused (403).
Clients that are not browsers send neither and are not a page's tool. Against DNS
rebinding (a hostile name pointed at 127.0.0.1), the app also answers only to the names
it is served under (Starlette's TrustedHostMiddleware, set up by ``create_app``).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
SAME_SITE = {"same-origin", "none"}


class SameOriginWrites:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in SAFE_METHODS:
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            if not _same_origin(headers):
                await _refuse(send)
                return
        await self.app(scope, receive, send)


def _same_origin(headers: dict[str, str]) -> bool:
    site = headers.get("sec-fetch-site")
    if site is not None and site not in SAME_SITE:
        return False
    origin = headers.get("origin")
    if origin is not None:
        return urlsplit(origin).netloc == headers.get("host", "")
    return True


async def _refuse(send: Send) -> None:
    body = b"refused: a change to the cluster must come from the console's own pages\n"
    await send(
        {
            "type": "http.response.start",
            "status": 403,
            "headers": [(b"content-type", b"text/plain; charset=utf-8")],
        }
    )
    await send({"type": "http.response.body", "body": body})
