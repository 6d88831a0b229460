"""Who may look and who may act: a login token, a session cookie, and CSRF protection on actions.

The token is generated at start (printed once, in the login URL) or read from a file; it never reaches a
page. Logging in with it sets an HttpOnly, SameSite=Strict session cookie; the session carries its own
CSRF token, which the page sends back in a header on every action. An action is refused unless the
session is valid, the header matches, and the request's Origin (when the browser sends one) is the
dashboard's own: a cross-site form or script can neither read the CSRF token nor forge the Origin.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from edge_sdk.core.errors import ConfigError

COOKIE = "edge_sdk_dashboard"
CSRF_HEADER = "x-csrf-token"
MIN_TOKEN_CHARS = 16
SESSION_S = 12 * 3600
MAX_SESSIONS = 256


@dataclass(frozen=True)
class Session:
    id: str
    csrf: str
    expires: float


class Refused(Exception):
    """An action refused: `status` is the HTTP status, the message says why."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def load_token(path: Path | None) -> tuple[str, bool]:
    """(the login token, whether it was generated): from `path` (its first line) or a new random one."""
    if path is None:
        return secrets.token_urlsafe(24), True
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the dashboard token ({exc.strerror})") from None
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"{path}: the dashboard token must be at least {MIN_TOKEN_CHARS} characters")
    return token, False


class DashboardAuth:
    """Checks the login token and keeps the sessions it opened (in memory: a restart logs everyone out)."""

    def __init__(self, token: str, read_only: bool = False):
        self._token = token
        self.read_only = read_only
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def login(self, given: str) -> Session | None:
        """A new session when `given` is the token, else None (compared in constant time)."""
        if not hmac.compare_digest(given.encode("utf-8"), self._token.encode("utf-8")):
            return None
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), time.time() + SESSION_S)
        with self._lock:
            self._expire()
            if len(self._sessions) >= MAX_SESSIONS:
                del self._sessions[min(self._sessions, key=lambda key: self._sessions[key].expires)]
            self._sessions[session.id] = session
        return session

    def logout(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def session(self, cookie: str | None) -> Session | None:
        if not cookie:
            return None
        with self._lock:
            session = self._sessions.get(cookie)
            if session is not None and session.expires < time.time():
                del self._sessions[cookie]
                return None
            return session

    def check_action(self, session: Session | None, csrf: str | None, origin: str | None, own_origin: str) -> None:
        """Raise Refused unless an action may run for this request."""
        if session is None:
            raise Refused(401, "log in first")
        if self.read_only:
            raise Refused(403, "the dashboard is read-only (started with --read-only)")
        if origin is not None and origin != own_origin:
            raise Refused(403, f"cross-site request refused (Origin {origin})")
        if not csrf or not hmac.compare_digest(csrf.encode("utf-8"), session.csrf.encode("utf-8")):
            raise Refused(403, "missing or wrong CSRF token")

    def _expire(self) -> None:
        now = time.time()
        for key in [key for key, session in self._sessions.items() if session.expires < now]:
            del self._sessions[key]
