"""The dashboard's web application (Starlette): three pages, their JSON, one server-sent event stream per
page, and the actions.

Every route but the login page and the static files needs a session (auth.py); actions also need the
session's CSRF token and a same-origin request, and are refused in read-only mode. Responses carry a
Content-Security-Policy that allows only the dashboard's own scripts, so even a rendering bug could not
run a script a device sent. The event stream sends the devices changed since the last batch, at most
every `FLUSH_S` seconds, plus the broker's state and the telemetry counters every second: one page of
1,000 devices reporting at 1 Hz gets four small batches a second, never a page reload.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from edge_sdk.core.errors import ConfigError, EdgeSDKError
from edge_sdk.core.sqlite_stamp import Stamp
from edge_sdk.fleet.operator.selection import parse_selector
from edge_sdk.fleet.wire.manifest import TargetSelector

from .actions import DashboardActions
from .auth import COOKIE, CSRF_HEADER, SESSION_S, DashboardAuth, Refused, Session
from .live import FleetView
from .rollouts_view import RolloutsView

log = logging.getLogger(__name__)

STATIC = Path(__file__).with_name("static")
CURRENT = ' aria-current="page"'
FLUSH_S = 0.25
STATUS_EVERY_S = 1.0
MAX_ACTION_BYTES = 16 * 1024
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}


@dataclass
class Dashboard:
    """What the routes serve from."""

    view: FleetView
    rollouts: RolloutsView
    actions: DashboardActions
    auth: DashboardAuth
    broker: str
    """The broker's address, shown on the page (never its credentials)."""


def create_app(dashboard: Dashboard) -> Starlette:
    auth = dashboard.auth

    layout = (STATIC / "layout.html").read_text(encoding="utf-8")

    def page(name: str, title: str) -> Callable[[Request], Awaitable[Response]]:
        """The layout around static/NAME.html (the page's <main>), its script static/NAME.js, the session's
        CSRF token and the read-only flag for the page's scripts."""
        links = (("/", "devices", "Devices"), ("/rollouts", "rollouts", "Rollouts"))
        nav = " ".join(
            f'<a href="{href}"{CURRENT if target == name else ""}>{label}</a>' for href, target, label in links
        )
        template = (
            layout.replace("{{title}}", title)
            .replace("{{script}}", f"{name}.js")
            .replace("{{nav}}", nav)
            .replace("{{main}}", (STATIC / f"{name}.html").read_text(encoding="utf-8"))
        )

        async def serve(request: Request) -> Response:
            session = _session(request)
            if session is None:
                return RedirectResponse("/login", status_code=303)
            html = template.replace("{{csrf}}", session.csrf).replace("{{read_only}}", str(auth.read_only).lower())
            return HTMLResponse(html, headers={"cache-control": "no-store"})

        return serve

    def _session(request: Request) -> Session | None:
        return auth.session(request.cookies.get(COOKIE))

    async def login(request: Request) -> Response:
        given = request.query_params.get("token")
        if request.method == "POST":  # a urlencoded form (Starlette's own form parser needs python-multipart)
            fields = parse_qs((await request.body())[:MAX_ACTION_BYTES].decode("utf-8", "replace"))
            given = (fields.get("token") or [""])[0]
        if given is None:
            return HTMLResponse((STATIC / "login.html").read_text(encoding="utf-8"))
        session = auth.login(given)
        if session is None:
            return HTMLResponse("wrong token", status_code=401)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, session.id, max_age=SESSION_S, httponly=True, samesite="strict", path="/")
        return response

    async def logout(request: Request) -> Response:
        session = _session(request)
        if session is not None:
            auth.logout(session.id)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    def api(handler: Callable[[Request], Awaitable[Any]]) -> Callable[[Request], Awaitable[Response]]:
        async def guarded(request: Request) -> Response:
            if _session(request) is None:
                return JSONResponse({"error": "log in first"}, status_code=401)
            try:
                result = await handler(request)
            except (ConfigError, EdgeSDKError) as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)
            if isinstance(result, Response):
                return result
            return JSONResponse(result, headers={"cache-control": "no-store"})

        return guarded

    async def devices(request: Request) -> Any:
        selector = _selector(request)
        _seq, views = dashboard.view.changes_since(0, selector)
        return {"devices": views, "status": _status(dashboard)}

    async def device(request: Request) -> Any:
        name = request.path_params["device"]
        if not dashboard.view.known(name):
            return JSONResponse({"error": f"no device {name!r}"}, status_code=404)
        return dashboard.view.device_detail(name)

    async def rollouts(request: Request) -> Any:
        return await asyncio.to_thread(_rollouts_json, dashboard)

    async def preview(request: Request) -> Any:
        jpeg = dashboard.view.preview(request.path_params["device"], request.path_params["key"])
        if jpeg is None:
            return JSONResponse({"error": "no preview"}, status_code=404)
        return Response(jpeg, media_type="image/jpeg", headers={"cache-control": "no-store"})

    async def events(request: Request) -> Any:
        selector = _selector(request)
        detail = request.query_params.get("device")
        page = "device" if detail is not None else request.query_params.get("page", "devices")
        return StreamingResponse(
            _event_stream(request, dashboard, page, selector, detail),
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )

    async def action(request: Request) -> Response:
        session = _session(request)
        own_origin = f"{request.url.scheme}://{request.headers.get('host', '')}"
        try:
            auth.check_action(session, request.headers.get(CSRF_HEADER), request.headers.get("origin"), own_origin)
        except Refused as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.status)
        body = await request.body()
        if len(body) > MAX_ACTION_BYTES:
            return JSONResponse({"error": "request too large"}, status_code=413)
        try:
            args = json.loads(body)
            if not isinstance(args, dict):
                raise ValueError("expected a JSON object")
            result = await asyncio.to_thread(_run_action, dashboard.actions, args)
        except (ValueError, ConfigError, EdgeSDKError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        log.info("dashboard action %s: %s", args.get("action"), json.dumps(result, default=str)[:200])
        return JSONResponse(result)

    app = Starlette(
        routes=[
            Route("/", page("devices", "devices")),
            Route("/rollouts", page("rollouts", "rollouts")),
            Route("/device/{device}", page("device", "device")),
            Route("/login", login, methods=["GET", "POST"]),
            Route("/favicon.ico", lambda _request: Response(status_code=204)),
            Route("/logout", logout, methods=["POST"]),
            Route("/api/devices", api(devices)),
            Route("/api/device/{device}", api(device)),
            Route("/api/rollouts", api(rollouts)),
            Route("/api/preview/{device}/{key:path}", api(preview)),
            Route("/api/events", api(events)),
            Route("/api/action", action, methods=["POST"]),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ],
        middleware=[Middleware(SecurityHeaders)],
    )

    return app


class SecurityHeaders:
    """Adds SECURITY_HEADERS to every response (plain ASGI, so event streams pass through unbuffered)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for key, value in SECURITY_HEADERS.items():
                    headers.setdefault(key, value)
            await send(message)

        await self.app(scope, receive, with_headers)


def _selector(request: Request) -> TargetSelector | None:
    text = request.query_params.get("select", "").strip()
    return parse_selector(text.split(), what="filter") if text else None


def _status(dashboard: Dashboard) -> dict[str, Any]:
    return {
        "broker": dashboard.broker,
        "connected": dashboard.view.client.is_connected,
        "read_only": dashboard.auth.read_only,
        "at": time.time(),
        **dashboard.view.counters(),
    }


def _rollouts_json(dashboard: Dashboard) -> dict[str, Any]:
    return {
        "rollouts": dashboard.rollouts.snapshot(),
        "jobs": dashboard.actions.jobs(),
        "manifests": dashboard.actions.manifests(),
    }


def _run_action(actions: DashboardActions, args: dict[str, Any]) -> dict[str, Any]:
    name = str(args.get("action", ""))
    if name in ("ping", "start", "stop"):
        return {"response": actions.command(str(args.get("device", "")), name, args.get("pipeline"))}
    if name == "deploy":
        select = args.get("select") or ""
        rollout = actions.deploy(
            str(args.get("manifest", "")),
            str(select).split(),
            int(args.get("first_wave", 1)),
            float(args.get("rate_per_min", 60)),
            float(args.get("abort_threshold", 0.2)),
        )
        return {"rollout": rollout}
    if name in ("resume", "rollback"):
        rollout = str(args.get("rollout", ""))
        (actions.resume if name == "resume" else actions.rollback)(rollout)
        return {"rollout": rollout}
    raise ConfigError(f"unknown action {name!r}: expected ping, start, stop, deploy, resume or rollback")


async def _event_stream(
    request: Request, dashboard: Dashboard, page: str, selector: TargetSelector | None, detail: str | None
) -> AsyncIterator[str]:
    """Server-sent events for `page`: devices: `devices` (changed rows, all of them first); device: `device`
    (the page of device `detail` when it changed); rollouts: `rollouts` (when the state file changed); and
    `status` every second for all."""
    seq, next_status, first = 0, 0.0, True
    rollouts_stamp: Stamp | None = None
    while not await request.is_disconnected():
        if page == "rollouts":
            written = dashboard.rollouts.stamp()
            if first or written != rollouts_stamp:
                rollouts_stamp = written
                yield _event("rollouts", await asyncio.to_thread(_rollouts_json, dashboard))
        elif page == "device":
            stamp = dashboard.view.stamp_of(str(detail))
            if stamp > seq:
                seq = stamp
                yield _event("device", dashboard.view.device_detail(str(detail)))
        else:
            seq, views = dashboard.view.changes_since(seq, selector)
            if views or first:
                yield _event("devices", {"devices": views, "full": first})
        first = False
        if time.monotonic() >= next_status:
            next_status = time.monotonic() + STATUS_EVERY_S
            yield _event("status", _status(dashboard))
        await asyncio.sleep(FLUSH_S)


def _event(name: str, data: Any) -> str:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'), default=str)}\n\n"
