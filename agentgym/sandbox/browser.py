"""The browser sandbox: Debian's Chromium driven by Playwright's async API, one browser per process, one isolated context per env, a closed network.

Playwright's sync API is not safe with many sessions in one process, so everything browser-side
runs on one event loop in a dedicated thread (:class:`LoopThread`); environments, which are used
from many threads at once, hand it coroutines with :meth:`BrowserHost.run` and block until they
finish. One Chromium process serves every env of the process; each env gets a
:class:`BrowserSession`, i.e. its own browser context (cookies, storage, cache) with its own tabs.

The network is closed by routing: a session lets through only its env's own loopback origins
(and ``data:``/``blob:``/``about:`` URLs); every other request is aborted and recorded in
:attr:`BrowserSession.blocked`, so the env can show it in the observation.

A crash is an env failure, not a model error: a renderer crash or a lost browser marks the
session :attr:`~BrowserSession.crashed`, actions on it raise :class:`BrowserCrashedError`, and
the next session starts a fresh Chromium when the old one is gone.

Chromium is the ``chromium`` Debian package, found on ``PATH`` or given explicitly (argument or
``AGENTGYM_CHROMIUM``); Playwright's own browser downloads are never used.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import threading
from pathlib import Path
from typing import Any, Awaitable, Iterable, TypeVar
from urllib.parse import urlsplit

from agentgym.sandbox.base import SandboxError, SandboxUnavailableError

__all__ = [
    "BrowserCrashedError",
    "BrowserHost",
    "BrowserSession",
    "BrowserUnavailableError",
    "LAUNCH_ARGS",
    "LoopThread",
    "find_chromium",
    "origin_of",
]

T = TypeVar("T")

#: Flags for a headless Chromium on a closed network, running as root in a container or CI.
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-first-run",
    "--no-default-browser-check",
    "--metrics-recording-only",
    "--mute-audio",
    "--font-render-hinting=none",  # identical glyph rasterisation across runs, for screenshot hashes
]

_ALWAYS_ALLOWED_SCHEMES = {"data", "blob", "about", "chrome-error"}


# Chromium refills form fields from history on back/forward. That per-entry state is invisible to
# snapshots (and to DevTools), so a fork could not reproduce it; autocomplete=off on every control
# turns it off, in every session alike.
_NO_FORM_RESTORE_JS = """
(() => {
  const off = (root) => root.querySelectorAll && root.querySelectorAll('input, textarea, select, form')
    .forEach(el => el.setAttribute('autocomplete', 'off'));
  new MutationObserver(records => records.forEach(r => r.addedNodes.forEach(n => {
    if (n.nodeType === 1) { if (n.matches('input, textarea, select, form')) n.setAttribute('autocomplete', 'off'); off(n); }
  }))).observe(document, {childList: true, subtree: true});
})();
"""


class BrowserUnavailableError(SandboxUnavailableError):
    """No usable Chromium on this machine."""


class BrowserCrashedError(SandboxError):
    """The page's renderer or the whole browser died; the episode cannot continue."""


def find_chromium(path: str | os.PathLike | None = None) -> str:
    """The Chromium executable: ``path``, else ``$AGENTGYM_CHROMIUM``, else ``chromium`` on ``PATH``."""
    candidates = [str(path)] if path else []
    if os.environ.get("AGENTGYM_CHROMIUM"):
        candidates.append(os.environ["AGENTGYM_CHROMIUM"])
    if not candidates:
        candidates = [found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))]
    for candidate in candidates:
        if Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    where = f" (looked for {', '.join(candidates)})" if candidates else ""
    raise BrowserUnavailableError(
        f"Chromium was not found{where}. Install Debian's package: `apt-get install chromium` "
        "(agentgym never downloads browsers), or pass its path / set AGENTGYM_CHROMIUM.")


def origin_of(url: str) -> str:
    """``scheme://host:port`` of a URL (the unit the network allow-list works in)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


class LoopThread:
    """An asyncio event loop running forever in a daemon thread; :meth:`run` executes coroutines on it."""

    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coroutine: Awaitable[T], timeout: float | None = None) -> T:
        """Run ``coroutine`` on the loop and wait for its result (from any thread but the loop's own)."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("LoopThread.run called from its own loop; await the coroutine instead")
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    async def arun(self, coroutine: Awaitable[T]) -> T:
        """Await ``coroutine`` on this loop from another event loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self.loop))

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)


class BrowserSession:
    """One env's browser context: its tabs, its network allow-list, and what that list blocked."""

    def __init__(self, host: "BrowserHost", context: Any, allowed_origins: Iterable[str],
                 aliases: dict[str, str] | None = None):
        self.host = host
        self.context = context
        self.allowed_origins = {origin_of(o) for o in allowed_origins}
        #: Real origin → the stable origin the agent sees (see :meth:`display` and :meth:`resolve`).
        self.aliases = {origin_of(real): origin_of(alias) for real, alias in (aliases or {}).items()}
        self.pages: list[Any] = []
        self.active = 0
        self.blocked: list[str] = []
        self.crashed: str | None = None
        self.closed = False
        self._spare: Any = None  # the blank tab recycle() left for the next new_page()
        self.recycled = 0
        context.on("page", self._adopt_and_focus)

    # -------------------------------------------------------------- tabs
    @property
    def page(self) -> Any:
        """The focused tab."""
        self.check_alive()
        if not self.pages:
            raise BrowserCrashedError("the session has no open tab")
        return self.pages[self.active]

    async def new_page(self, url: str | None = None) -> Any:
        """Open a tab (or take the blank one :meth:`recycle` left), focus it, and optionally load ``url``."""
        self.check_alive()
        page, self._spare = self._spare, None
        if page is None or page.is_closed():
            page = await self.context.new_page()
        self._adopt(page)
        self.active = self.pages.index(page)
        if url:
            await page.goto(url, wait_until="load")
        return page

    async def close_page(self, index: int) -> None:
        page = self.pages[index]
        await page.close()  # the "close" handler removes it from self.pages

    def display(self, text: str) -> str:
        """``text`` with real origins replaced by their aliases."""
        for real, alias in self.aliases.items():
            text = text.replace(real, alias)
        return text

    def resolve(self, url: str) -> str:
        """A URL the agent wrote, with an alias replaced by the real origin."""
        for real, alias in self.aliases.items():
            if url.lower().startswith(alias):
                return real + url[len(alias):]
        return url

    async def recycle(self) -> None:
        """Make this context as good as new for the next episode, keeping its renderer process.

        Cheaper than a new context (no process start): extra tabs closed, the first tab blank
        with an empty history, cookies and every kind of storage of the allowed origins cleared.
        """
        self.check_alive()
        for page in self.pages[1:]:
            await page.close()
        page = self.pages[0] if self.pages else await self.new_page()
        self.active = 0
        await page.goto("about:blank")
        await self.context.clear_cookies()
        cdp = await self.context.new_cdp_session(page)
        try:
            await cdp.send("Page.resetNavigationHistory")
            for origin in self.allowed_origins:
                await cdp.send("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "all"})
        finally:
            await cdp.detach()
        self.blocked.clear()
        self._spare = page
        self.recycled += 1

    def allows(self, url: str) -> bool:
        scheme = urlsplit(url).scheme.lower()
        return scheme in _ALWAYS_ALLOWED_SCHEMES or origin_of(url) in self.allowed_origins

    def drain_blocked(self) -> list[str]:
        """The URLs blocked since the last call."""
        blocked, self.blocked = self.blocked, []
        return blocked

    def check_alive(self) -> None:
        if self.crashed:
            raise BrowserCrashedError(self.crashed)
        if self.closed:
            raise BrowserCrashedError("the browser session is closed")

    async def close(self) -> None:
        """Close the context and its tabs; idempotent, and safe when the browser is already gone."""
        if self.closed:
            return
        self.closed = True
        self.host._sessions.discard(self)
        try:
            await self.context.close()
        except Exception:  # the browser died first: nothing left to close
            pass

    # -------------------------------------------------------------- wiring
    def _adopt_and_focus(self, page: Any) -> None:
        # A tab the page opened (target=_blank, window.open) gets the focus, as in a real browser.
        self._adopt(page)
        self.active = self.pages.index(page)

    def _adopt(self, page: Any) -> None:
        if page in self.pages:
            return
        self.pages.append(page)
        page.on("crash", lambda _page: self._mark_crashed("the page crashed (renderer process died)"))
        page.on("close", self._forget)

    def _forget(self, page: Any) -> None:
        if page in self.pages:
            index = self.pages.index(page)
            self.pages.remove(page)
            if self.active >= index and self.active > 0:
                self.active -= 1

    def _mark_crashed(self, reason: str) -> None:
        self.crashed = self.crashed or reason

    async def _route(self, route: Any) -> None:
        url = route.request.url
        if self.allows(url):
            await route.continue_()
        else:
            self.blocked.append(url)
            await route.abort("blockedbyclient")


class BrowserHost:
    """One Chromium per process, shared by every env, and the loop thread that drives it.

    :meth:`shared` returns the process's host (made on first use). :meth:`open_session` hands
    out isolated sessions; :meth:`close_session` recycles them. When the browser is lost (a
    crash, an OOM kill) the next :meth:`open_session` launches a fresh one.
    """

    _shared: "BrowserHost | None" = None
    _shared_lock = threading.Lock()

    def __init__(self, executable: str | os.PathLike | None = None, *, headless: bool = True):
        self.executable = find_chromium(executable)
        self.headless = headless
        self.loop_thread = LoopThread("agentgym-browser")
        self._playwright: Any = None
        self._browser: Any = None
        self._launch_lock: asyncio.Lock | None = None
        self._sessions: set[BrowserSession] = set()
        self.launches = 0
        self.sessions_opened = 0
        self._closed = False

    @classmethod
    def shared(cls, executable: str | os.PathLike | None = None) -> "BrowserHost":
        """The process's browser host (its executable is fixed by the first caller)."""
        with cls._shared_lock:
            if cls._shared is None or cls._shared._closed:
                cls._shared = cls(executable)
                atexit.register(cls._shared.close)
            return cls._shared

    # -------------------------------------------------------------- running code on the loop
    def run(self, coroutine: Awaitable[T], timeout: float | None = None) -> T:
        return self.loop_thread.run(coroutine, timeout)

    async def arun(self, coroutine: Awaitable[T]) -> T:
        return await self.loop_thread.arun(coroutine)

    # -------------------------------------------------------------- sessions
    async def open_session(self, allowed_origins: Iterable[str], *, viewport: tuple[int, int] = (1280, 720),
                           storage_state: dict | None = None, aliases: dict[str, str] | None = None) -> BrowserSession:
        """A fresh isolated context (optionally with cookies and local storage) on the shared browser."""
        browser = await self._ensure_browser()
        width, height = viewport
        context = await browser.new_context(
            viewport={"width": width, "height": height}, device_scale_factor=1,
            storage_state=storage_state, service_workers="block", locale="en-US", timezone_id="UTC",
            reduced_motion="reduce")
        await context.add_init_script(_NO_FORM_RESTORE_JS)
        session = BrowserSession(self, context, allowed_origins, aliases)
        await context.route("**/*", session._route)
        self._sessions.add(session)
        self.sessions_opened += 1
        return session

    async def close_session(self, session: BrowserSession) -> None:
        await session.close()

    @property
    def live_sessions(self) -> int:
        return len(self._sessions)

    async def context_count(self) -> int:
        """Contexts the browser itself reports open (a leak check independent of our bookkeeping)."""
        return len(self._browser.contexts) if self._browser is not None and self._browser.is_connected() else 0

    def chromium_pids(self) -> list[int]:
        """The ids of this host's Chromium processes (browser, renderers, utilities)."""
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            # Debian's /usr/bin/chromium is a shell wrapper that execs /usr/lib/chromium/chromium;
            # child processes overwrite argv[0] with their whole command line.
            program = argv[0].decode(errors="replace").split(" ")[0] if argv else ""
            name = os.path.basename(program)
            if name.startswith(("chromium", "chrome")) and self._owns(entry):
                pids.append(int(entry.name))
        return sorted(pids)

    def _owns(self, proc: Path) -> bool:
        # Chromium's children all descend from the browser process Playwright started for us.
        own = os.getpid()
        try:
            pid = int(proc.name)
            for _ in range(64):
                stat = (Path("/proc") / str(pid) / "stat").read_text()
                pid = int(stat.rsplit(")", 1)[1].split()[1])
                if pid == own:
                    return True
                if pid <= 1:
                    return False
        except (OSError, ValueError, IndexError):
            return False
        return False

    async def _ensure_browser(self) -> Any:
        if self._launch_lock is None:
            self._launch_lock = asyncio.Lock()
        async with self._launch_lock:
            if self._closed:
                raise BrowserUnavailableError("the browser host is closed")
            if self._browser is not None and self._browser.is_connected():
                return self._browser
            if self._playwright is None:
                from playwright.async_api import async_playwright

                self._playwright = await async_playwright().start()
            self._browser = await self._playwright.chromium.launch(
                executable_path=self.executable, headless=self.headless, args=LAUNCH_ARGS)
            self._browser.on("disconnected", self._on_disconnected)
            self.launches += 1
            return self._browser

    def _on_disconnected(self, _browser: Any) -> None:
        for session in list(self._sessions):
            session._mark_crashed("the browser process exited")
        self._browser = None

    def close(self) -> None:
        """Close every session, the browser and Playwright, and stop the loop thread; idempotent."""
        if self._closed:
            return
        self._closed = True

        async def shutdown() -> None:
            for session in list(self._sessions):
                await session.close()
            if self._browser is not None:
                try:
                    await self._browser.close()
                except Exception:
                    pass
            if self._playwright is not None:
                await self._playwright.stop()

        try:
            self.loop_thread.run(shutdown(), timeout=30)
        except Exception:
            pass
        self.loop_thread.stop()

