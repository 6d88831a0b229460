"""Run the dashboard: connect to the broker as the operator, then serve the app with uvicorn until a signal.

The MQTT connection starts in the background and keeps reconnecting, so a broker that is down at start
or goes away later shows as a banner on the page rather than stopping the dashboard.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from edge_sdk.core.errors import BackendUnavailableError, ConfigError
from edge_sdk.fleet.operator.client import FleetOperator
from edge_sdk.fleet.operator.rollout_store import RolloutStore
from edge_sdk.fleet.wire.broker_file import load_broker_file
from edge_sdk.mqtt import MqttClient

from .actions import DashboardActions
from .auth import DashboardAuth, load_token
from .live import FleetView, TelemetryLimits
from .rollouts_view import RolloutsView

log = logging.getLogger(__name__)

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
SHUTDOWN_S = 3
"""How long a stop waits for open pages (their event streams never end by themselves)."""


@dataclass(frozen=True)
class DashboardSettings:
    broker_file: Path
    state_file: Path = Path("rollouts.db")
    host: str = "127.0.0.1"
    port: int = 8080
    token_file: Path | None = None
    read_only: bool = False
    manifests_dir: Path | None = None
    key_file: Path | None = None
    limits: TelemetryLimits = field(default_factory=TelemetryLimits)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (port 0: any free one), made before uvicorn starts so the URL can be printed."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(128)
    return sock


def _server_class() -> type:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, but a SIGINT/SIGTERM only stops it: uvicorn re-raises the signal once it has
        stopped, which would end the process before the MQTT connection is closed cleanly."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return Server


def serve_dashboard(settings: DashboardSettings, announce: Callable[[str], None] = print) -> None:
    """Serve until SIGINT/SIGTERM; `announce` gets the lines a person needs (the URL, the login link)."""
    try:
        import uvicorn

        from .app import Dashboard, create_app
    except ImportError:
        raise BackendUnavailableError(
            "the fleet dashboard needs Starlette and uvicorn: pip install 'edge-sdk[dashboard]'"
        ) from None

    token, generated = load_token(settings.token_file)
    broker = load_broker_file(settings.broker_file)
    sock = bind(settings.host, settings.port)
    client = MqttClient(broker)
    client.start()
    operator = FleetOperator(client).start()
    if settings.state_file.is_file():
        with RolloutStore(settings.state_file) as store:
            operator.remember(store.device_facts())
    view = FleetView(operator, client, settings.limits).start()
    rollouts = RolloutsView(settings.state_file)
    actions = DashboardActions(
        operator, settings.state_file, settings.manifests_dir, settings.key_file, settings.broker_file
    )
    auth = DashboardAuth(token, read_only=settings.read_only)
    app = create_app(Dashboard(view, rollouts, actions, auth, broker.address))
    host, port = sock.getsockname()[:2]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    announce(f"fleet dashboard on {url} (broker {broker.address}{', read-only' if settings.read_only else ''})")
    announce(f"log in: {url}/login?token={token}" if generated else f"log in with the token in {settings.token_file}")
    if settings.host not in LOCAL_HOSTS:
        announce("note: listening beyond this machine over plain HTTP; put it behind a TLS proxy")
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=SHUTDOWN_S
    )
    server = _server_class()(config)
    try:
        server.run(sockets=[sock])
    finally:
        view.close()
        operator.close()
        rollouts.close()
        client.disconnect()
        sock.close()
