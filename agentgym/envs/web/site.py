"""Self-hosted web apps for web envs: an aiohttp server on loopback per env whose whole server state is one SQLite database.

An app is a :class:`WebApp` subclass that builds its seeded database and declares its routes::

    class Shop(WebApp):
        name = "shop"
        def build_database(self, db):            # deterministic: same rows every time
            db.conn.executescript(SCHEMA); ...
        def routes(self):
            return [web.get("/", self.home), web.post("/cart", self.add_to_cart)]
        async def home(self, request):
            return self.page(request, "Home", "<h1>Shop</h1>")

The database is built once per process and class, then copied (SQLite's backup API) for every
reset, snapshot and fork, so a reset costs milliseconds. All handlers must be deterministic in
the database state: no wall clock, no randomness — :meth:`WebApp.now` is a logical clock kept in
the database, so replaying the same requests gives the same state (forks rely on this).

The logged-in user is the ``user`` cookie (set by the env at task start, or by the app's own
login form); :meth:`WebApp.user` reads it.
"""

from __future__ import annotations

import asyncio
import datetime
import html
import threading
from typing import Any, ClassVar, NoReturn, cast

from aiohttp import web

from agentgym.envs.state import SQLiteState, StateCopy
from agentgym.sandbox.browser import LoopThread

__all__ = ["WebApp", "esc", "app_loop", "form_value"]

esc = html.escape

_app_loop: LoopThread | None = None
_app_loop_lock = threading.Lock()


def app_loop() -> LoopThread:
    """The process's loop thread for app servers (apart from the browser's, so app work never stalls it)."""
    global _app_loop
    with _app_loop_lock:
        if _app_loop is None:
            _app_loop = LoopThread("agentgym-web-apps")
        return _app_loop


_BASE_STYLE = """
body { font-family: sans-serif; margin: 0; color: #222; }
header { background: #234; color: #fff; padding: 8px 16px; display: flex; gap: 16px; align-items: center; }
header a { color: #fff; }
main { padding: 12px 16px; }
table { border-collapse: collapse; } td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
.flash { background: #ffd; border: 1px solid #cc9; padding: 6px; margin-bottom: 8px; }
.error { background: #fdd; border: 1px solid #c99; padding: 6px; margin-bottom: 8px; }
"""


class WebApp:
    """A multi-page app served on ``127.0.0.1:<free port>`` with its state in :attr:`db` (see the module docstring)."""

    #: Short name, used in task ids and env ids.
    name: ClassVar[str] = ""
    #: Logical start time of the seeded data (ISO 8601, UTC).
    epoch: ClassVar[str] = "2026-01-05T09:00:00"
    _pristine: ClassVar[dict[type, StateCopy]] = {}
    _pristine_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self):
        self.db: SQLiteState = self.pristine().restore()
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    # ------------------------------------------------------------------ for subclasses
    def build_database(self, db: SQLiteState) -> None:
        """Create the schema and the seeded rows (deterministically)."""
        raise NotImplementedError

    def routes(self) -> list[web.RouteDef]:
        """The app's aiohttp routes (bound methods that read and write :attr:`db`)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ state
    @classmethod
    def pristine(cls) -> StateCopy:
        """The seeded database, built once per process."""
        with cls._pristine_lock:
            if cls not in cls._pristine:
                db = SQLiteState()
                db.conn.executescript(
                    "CREATE TABLE IF NOT EXISTS agentgym_clock (ticks INTEGER NOT NULL);"
                    "INSERT INTO agentgym_clock VALUES (0);"
                )
                cls.__new__(cls).build_database(db)  # no __init__: it would ask for the pristine copy
                cls._pristine[cls] = StateCopy(db)
            return cls._pristine[cls]

    def reset(self) -> None:
        """Back to the seeded state."""
        self.db = self.pristine().restore()

    def capture(self) -> StateCopy:
        return StateCopy(self.db)

    def load(self, copy: StateCopy) -> None:
        self.db = copy.restore()

    def now(self) -> str:
        """The logical clock: one minute after the previous call, starting at :attr:`epoch`."""
        self.db.execute("UPDATE agentgym_clock SET ticks = ticks + 1")
        ticks = self.db.query("SELECT ticks FROM agentgym_clock")[0][0]
        start = datetime.datetime.fromisoformat(self.epoch)
        return (start + datetime.timedelta(minutes=ticks)).isoformat(sep=" ", timespec="minutes")

    # ------------------------------------------------------------------ serving
    @property
    def origin(self) -> str:
        if self.port is None:
            raise RuntimeError(f"{self.name} is not started")
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> str:
        """Serve on a free loopback port (idempotent); returns the origin."""
        if self._runner is None:
            app_loop().run(self._start(), timeout=30)
        return self.origin

    async def _start(self) -> None:
        app = web.Application()
        app.add_routes(self.routes())
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = cast(asyncio.Server, site._server).sockets[0].getsockname()[1]
        self._runner = runner

    def close(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            try:
                app_loop().run(runner.cleanup(), timeout=30)
            except Exception:
                pass
        self.db.close()

    # ------------------------------------------------------------------ helpers for handlers
    @staticmethod
    def user(request: web.Request) -> str | None:
        """The logged-in user (the ``user`` cookie), or None."""
        return request.cookies.get("user") or None

    def page(
        self, request: web.Request, title: str, body: str, *, nav: str = "", status: int = 200, style: str = ""
    ) -> web.Response:
        """A complete HTML page: the app's header with ``nav`` links, then ``body`` (already escaped HTML)."""
        user = self.user(request)
        who = f"<span>Signed in as {esc(user)}</span>" if user else ""
        document = (
            f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{esc(title)}</title>"
            f"<style>{_BASE_STYLE}{style}</style></head><body><header><strong>{esc(self.name.title())}</strong>"
            f"{nav}{who}</header><main>{body}</main></body></html>"
        )
        return web.Response(text=document, content_type="text/html", status=status)

    @staticmethod
    def redirect(location: str) -> NoReturn:
        """Post/redirect/get: a 303 to ``location``."""
        raise web.HTTPSeeOther(location)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.origin if self.port else 'not started'})"


def form_value(form: Any, key: str, default: str = "") -> str:
    """A form field, stripped, with a default when absent."""
    value = form.get(key, default)
    return value.strip() if isinstance(value, str) else default
