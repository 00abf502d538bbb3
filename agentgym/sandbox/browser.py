"""The browser sandbox: Debian's Chromium driven by Playwright's async API, one browser per process, one isolated context per env, a closed network.

Playwright's sync API is not safe with many sessions in one process, so everything browser-side
runs on one event loop in a dedicated thread (:class:`LoopThread`); environments, which are used
from many threads at once, hand it coroutines with :meth:`BrowserHost.run` and block until they
finish. One Chromium process serves every env of the process; each env gets a
:class:`BrowserSession`, i.e. its own browser context (cookies, storage, cache) with its own tabs.

Chromium renders pages the agent controls, so it is confined like any other sandbox:

* **Unprivileged and sandboxed.** Chromium runs with its own sandbox on (namespaces and
  seccomp-BPF for every renderer). When this process is root, Chromium runs as the system user
  :data:`BROWSER_USER` (created on first use) through a launcher that drops root with
  ``setpriv``; its home and temporary files live in a directory of that user's, removed when the
  browser closes. Where the kernel refuses the sandbox, the launch fails with Chromium's reason;
  ``AGENTGYM_CHROMIUM_SANDBOX=0`` is the explicit, logged way to run without it.
* **Only the env's origins, at the network layer.** Each context sends all its traffic, loopback
  included, through its own :class:`NetworkGate` (an HTTP proxy on loopback) that connects only
  to the session's origins, so a fetch, frame, image, WebSocket or worker cannot reach any other
  port. Routing additionally aborts (and lists) other requests before they leave the page.
  Every blocked request is recorded in :attr:`BrowserSession.blocked`, for the observation.
* **No ``data:``/``blob:`` navigations** unless the env declares the scheme: the gate gives every
  document a ``frame-src`` policy of the session's origins, the agent's ``goto`` is checked with
  :meth:`BrowserSession.allows`, and Chromium itself refuses top-level ``data:`` navigations by
  pages. Such URLs as subresources (images, fonts) stay allowed.
* **No downloads.** Contexts refuse them; each one is listed in :attr:`BrowserSession.downloads`.

A crash is an env failure, not a model error: a renderer crash or a lost browser marks the
session :attr:`~BrowserSession.crashed`, actions on it raise :class:`BrowserCrashedError`, and
the next session starts a fresh Chromium when the old one is gone.

Chromium is the ``chromium`` Debian package, found on ``PATH`` or given explicitly (argument or
``AGENTGYM_CHROMIUM``); Playwright's own browser downloads are never used.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import pwd
import shlex
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from agentgym.extras import requires
from agentgym.sandbox import labels
from agentgym.sandbox.base import SandboxError, SandboxUnavailableError

__all__ = [
    "BROWSER_USER",
    "BrowserCrashedError",
    "BrowserHost",
    "BrowserSession",
    "BrowserUnavailableError",
    "LAUNCH_ARGS",
    "LoopThread",
    "NetworkGate",
    "find_chromium",
    "navigation_history",
    "origin_of",
]

T = TypeVar("T")
log = logging.getLogger(__name__)

#: Flags for a headless Chromium on a closed network (the sandbox flag is Playwright's, from ``sandbox``).
LAUNCH_ARGS = [
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
    # WebRTC would otherwise send UDP (and TURN over TCP) around the proxy, to any port.
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
]

#: Features turned off besides Playwright's: autofill's server queries would go to the gate (and be
#: reported as blocked) whenever a page has a form.
_DISABLED_FEATURES = ("AutofillServerCommunication",)

#: The account Chromium runs as when this process is root.
BROWSER_USER = "agentgym-browser"

#: Environment variables Chromium gets from this process (nothing else: no credentials).
_PASSED_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "FONTCONFIG_FILE", "FONTCONFIG_PATH")


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


# A context is wiped and reused as a spare this many times at most: a renderer's memory grows with
# the pages it has seen, so a fresh one now and then bounds it.
_MAX_SPARE_REUSES = 50

# What a tab shows for a back/forward entry while BrowserSession.rebuild_history recreates the
# list; never cached, so going to the entry later loads it from its site.
_PLACEHOLDER = "<!doctype html><title></title>"
_NO_STORE = {"Cache-Control": "no-store"}


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
        "(agentgym never downloads browsers), or pass its path / set AGENTGYM_CHROMIUM."
    )


def origin_of(url: str) -> str:
    """``scheme://host:port`` of a URL (the unit the network allow-list works in)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def browser_account() -> tuple[int, int] | None:
    """(uid, gid) of :data:`BROWSER_USER` when this process is root (creating the user once), else None.

    Chromium refuses its sandbox as root, and a browser that renders agent-written pages must not
    hold root anyway; an unprivileged process simply runs Chromium as itself.
    """
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(BROWSER_USER)
    except KeyError:
        useradd = shutil.which("useradd") or "/usr/sbin/useradd"
        done = subprocess.run(
            [
                useradd,
                "--system",
                "--user-group",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                "--shell",
                "/usr/sbin/nologin",
                BROWSER_USER,
            ],
            capture_output=True,
            text=True,
        )
        try:  # another process may have created it meanwhile
            entry = pwd.getpwnam(BROWSER_USER)
        except KeyError:
            raise BrowserUnavailableError(
                f"Chromium must not run as root, and the user {BROWSER_USER} could not be created "
                f"({done.stderr.strip() or 'useradd exited ' + str(done.returncode)}); create it with "
                f"`useradd --system --user-group {BROWSER_USER}`."
            ) from None
    return entry.pw_uid, entry.pw_gid


class _Profile:
    """Where one Chromium launch lives: a home for its files (owned by the account Chromium runs as) and the launcher Playwright starts.

    The launcher passes one ``--disable-features`` (Chromium keeps only the last one given, which
    would drop Playwright's) and, when this process is root, hands Chromium the profile
    directory Playwright made and drops to :data:`BROWSER_USER` with ``setpriv``. The directory
    itself stays this process's, so the browser's account cannot rewrite a launcher that root
    executes; :meth:`remove` deletes everything once the browser is gone.
    """

    def __init__(self, chromium: str, account: tuple[int, int] | None):
        self.root = Path(tempfile.mkdtemp(prefix=labels.browser_dir_prefix()))
        self.home = self.root / "home"
        self.home.mkdir(mode=0o700)
        if account is not None:
            os.chown(self.home, *account)
            self.root.chmod(0o711)
        self.executable = str(self._write_launcher(chromium, account))

    def _write_launcher(self, chromium: str, account: tuple[int, int] | None) -> Path:
        command, hand_over = shlex.quote(chromium), ""
        if account is not None:
            setpriv = shutil.which("setpriv")
            if setpriv is None:
                raise BrowserUnavailableError(
                    "setpriv (Debian's util-linux) is needed to run Chromium as "
                    f"{BROWSER_USER} when agentgym runs as root"
                )
            uid, gid = account
            hand_over = f'    --user-data-dir=*) chown -R {uid}:{gid} "${{arg#--user-data-dir=}}" || exit 1;;\n'
            command = (
                f"{shlex.quote(setpriv)} --reuid={uid} --regid={gid} --clear-groups --inh-caps=-all "
                f"--bounding-set=-all -- {command}"
            )
        script = (
            "#!/bin/sh\n# Written by agentgym.sandbox.browser for one Chromium launch.\n"
            f"features={','.join(_DISABLED_FEATURES)}\n"
            'for arg do\n  shift\n  case "$arg" in\n'
            '    --disable-features=*) features="$features,${arg#--disable-features=}"; continue;;\n'
            f'{hand_over}  esac\n  set -- "$@" "$arg"\ndone\n'
            f'exec {command} "$@" "--disable-features=$features"\n'
        )
        launcher = self.root / "launch"
        launcher.write_text(script)
        launcher.chmod(0o755)
        return launcher

    def env(self) -> dict[str, str]:
        env = {key: os.environ[key] for key in _PASSED_ENV if key in os.environ}
        home = str(self.home)
        return dict(env, HOME=home, TMPDIR=home, XDG_CONFIG_HOME=home, XDG_CACHE_HOME=home)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class NetworkGate:
    """One session's HTTP proxy on loopback: the context sends it every request (loopback included), and it connects only to the session's origins.

    Page routing cannot see WebSockets, some worker requests or WebRTC; a proxy sees every
    connection Chromium's network service makes for the context. A request for an origin
    outside ``origins`` gets a 403 and is listed in :attr:`refused`. Each forwarded request
    has its own upstream connection (``Connection: close``), so one client connection can never
    carry a request to an origin that was not checked. Responses get a ``Content-Security-Policy``
    of ``frame-src`` and ``object-src`` limited to ``frame_sources``, which keeps ``data:`` and
    ``blob:`` documents out of frames.
    """

    _REFUSAL = (
        b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: 37\r\n\r\n"
        b"agentgym: outside this task's sites.\n"
    )

    def __init__(self, origins: Iterable[str], frame_sources: Iterable[str]):
        self.allow(origins, frame_sources)
        #: What was refused since the last :meth:`drain` (URLs; ``CONNECT host:port`` for tunnels).
        self.refused: list[str] = []
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def allow(self, origins: Iterable[str], frame_sources: Iterable[str]) -> None:
        """Set the origins this gate connects to and the frame sources its policy allows (a spare context's gate gets them when a session takes it)."""
        self.origins = frozenset(origin_of(origin) for origin in origins)
        sources = " ".join(frame_sources) or "'none'"
        self._policy = f"Content-Security-Policy: frame-src {sources}; object-src {sources}\r\n".encode()

    async def start(self) -> str:
        """Listen on a free loopback port; returns the proxy's URL."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def drain(self) -> list[str]:
        refused, self.refused = self.refused, []
        return refused

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        upstream: asyncio.StreamWriter | None = None
        try:
            head = await reader.readuntil(b"\r\n\r\n")  # at most the reader's 64 KiB limit
            request_line, _, headers = head.partition(b"\r\n")
            method, target, version = request_line.decode("latin-1").split(" ", 2)
            tunnel = method.upper() == "CONNECT"
            # A tunnel (WebSocket, HTTPS) names host:port; its origin may be any of the schemes.
            url = f"http://{target}/" if tunnel else target
            origins = (
                [f"{scheme}://{target}".lower() for scheme in ("http", "https", "ws", "wss")]
                if tunnel
                else [origin_of(target)]
            )
            parts = urlsplit(url)
            if parts.hostname is None or not self.origins.intersection(origins):
                self.refused.append(f"CONNECT {target}" if tunnel else target)
                writer.write(self._REFUSAL)
                return
            up_reader, upstream = await asyncio.open_connection(parts.hostname, parts.port or 80)
            if tunnel:
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            else:
                path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                kept = [
                    line
                    for line in headers.split(b"\r\n")
                    if line
                    and not line.lower().startswith(
                        (b"connection:", b"proxy-connection:", b"keep-alive:", b"proxy-authorization:")
                    )
                ]
                upstream.write(
                    b"\r\n".join(
                        [f"{method} {path} {version}".encode("latin-1"), *kept, b"Connection: close", b"", b""]
                    )
                )
            await self._relay(reader, writer, up_reader, upstream, tunnel=tunnel)
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # a client or upstream that went away; Chromium sees the connection close
        finally:
            self._writers.discard(writer)
            for stream in (writer, upstream):
                if stream is not None:
                    stream.close()

    async def _relay(
        self,
        client_reader: asyncio.StreamReader,
        client: asyncio.StreamWriter,
        upstream_reader: asyncio.StreamReader,
        upstream: asyncio.StreamWriter,
        *,
        tunnel: bool,
    ) -> None:
        """Copy bytes both ways until either side ends (the upstream closes after its response; a tunnel with either end)."""

        async def to_client() -> None:
            if not tunnel:
                head = await upstream_reader.readuntil(b"\r\n\r\n")
                client.write(head[:-2] + self._policy + b"\r\n")
            await _copy(upstream_reader, client)

        copies = [asyncio.ensure_future(_copy(client_reader, upstream)), asyncio.ensure_future(to_client())]
        try:
            await asyncio.wait(copies, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in copies:
                task.cancel()
            await asyncio.gather(*copies, return_exceptions=True)


async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    while chunk := await source.read(65536):
        sink.write(chunk)
        await sink.drain()


async def navigation_history(page: Any) -> tuple[list[str], int]:
    """A tab's back/forward list (URLs) as Chromium holds it, and the index of the current entry (DevTools)."""
    cdp = await page.context.new_cdp_session(page)
    try:
        history = await cdp.send("Page.getNavigationHistory")
    finally:
        await cdp.detach()
    urls = [entry["url"] for entry in history["entries"]]
    index = history["currentIndex"]
    if urls[0] == "about:blank" and index > 0:  # the blank page a new tab starts on is not history
        urls, index = urls[1:], index - 1
    return urls, index


class LoopThread:
    """An asyncio event loop running forever in a daemon thread; :meth:`run` executes coroutines on it."""

    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coroutine`` on the loop and wait for its result (from any thread but the loop's own)."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("LoopThread.run called from its own loop; await the coroutine instead")
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    async def arun(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Await ``coroutine`` on this loop from another event loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self.loop))

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)


class BrowserSession:
    """One env's browser context: its tabs, its network allow-list and gate, and what they blocked.

    ``schemes`` are the URL schemes besides the origins' that this session's pages may navigate
    to (e.g. ``{"blob"}`` for a site that opens generated documents); by default none.
    """

    def __init__(
        self,
        host: BrowserHost,
        context: Any,
        allowed_origins: Iterable[str],
        aliases: dict[str, str] | None = None,
        *,
        schemes: Iterable[str] = (),
        gate: NetworkGate | None = None,
        viewport: tuple[int, int] = (1280, 720),
    ):
        self.host = host
        self.context = context
        self.viewport = viewport
        self.gate = gate
        self.assign(allowed_origins, aliases, schemes)
        self.pages: list[Any] = []
        self.active = 0
        self.blocked: list[str] = []
        #: URLs of downloads the pages started (all refused: nothing is written anywhere).
        self.downloads: list[str] = []
        self.crashed: str | None = None
        self.closed = False
        self._spare: Any = None  # the blank tab recycle() (or the spare pool) left for the next new_page()
        self.recycled = 0
        # Tabs whose back/forward entries are only recorded, not yet in Chromium (see defer_history).
        self._deferred: dict[Any, tuple[list[str], list[str]]] = {}
        self._stubbing: Any = None  # the tab whose navigations get placeholder documents (rebuild_history)
        context.on("page", self._adopt_and_focus)

    def assign(
        self, allowed_origins: Iterable[str], aliases: dict[str, str] | None = None, schemes: Iterable[str] = ()
    ) -> None:
        """Set what this session's pages may reach and how its origins are shown (a spare context gets them when taken)."""
        self.allowed_origins = {origin_of(o) for o in allowed_origins}
        self.schemes = frozenset(scheme.lower() for scheme in schemes)
        #: Real origin → the stable origin the agent sees (see :meth:`display` and :meth:`resolve`).
        self.aliases = {origin_of(real): origin_of(alias) for real, alias in (aliases or {}).items()}
        if self.gate is not None:
            origins = sorted(self.allowed_origins)
            self.gate.allow(origins, origins + [f"{scheme}:" for scheme in sorted(self.schemes)])

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
                return real + url[len(alias) :]
        return url

    async def recycle(self) -> None:
        """Make this context as good as new for the next episode, keeping its renderer process.

        Cheaper than a new context (no process start): extra tabs closed, the first tab blank
        with an empty history, cookies and every kind of storage of the allowed origins cleared.
        """
        self.check_alive()
        self._deferred.clear()
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
        self.discard_reports()
        self._spare = page
        self.recycled += 1

    # -------------------------------------------------------------- back/forward history
    async def history(self, page: Any) -> tuple[list[str], int]:
        """A tab's back/forward list (URLs) and the index of its current entry, counting entries :meth:`defer_history` recorded."""
        urls, index = await navigation_history(page)
        deferred = self._deferred.get(page)
        if deferred is None:
            return urls, index
        back, forward = deferred
        # Chromium holds the restored entry and whatever came after it; a new navigation from the
        # restored entry has dropped the recorded forward entries, as it would have in the original.
        return back + urls + (forward if len(urls) == 1 else []), len(back) + index

    def defer_history(self, page: Any, back: list[str], forward: list[str]) -> None:
        """Record that ``page``'s current entry has ``back`` entries before it and ``forward`` after it, without loading them.

        A fork loads only each tab's current page; :meth:`rebuild_history` puts the recorded
        entries into Chromium when a back or forward navigation needs them.
        """
        if back or forward:
            self._deferred[page] = (list(back), list(forward))

    async def needs_history(self, page: Any, step: int) -> bool:
        """Whether going ``step`` (-1 back, +1 forward) from ``page``'s entry reaches an entry only recorded."""
        deferred = self._deferred.get(page)
        if deferred is None:
            return False
        back, forward = deferred
        urls, index = await navigation_history(page)
        return bool(back) and index == 0 if step < 0 else bool(forward) and len(urls) == 1

    async def rebuild_history(self, page: Any) -> bool:
        """Put ``page``'s whole recorded back/forward list into Chromium, at the same entry; False if Chromium built another list.

        The entries are navigated in order with placeholder documents (no request reaches a site,
        no page script runs: a visit must not change what the site stores), so each is loaded
        from its site when the agent goes to it, as it would be in the original. The current page
        becomes a placeholder too: call this just before leaving it.
        """
        if page not in self._deferred:
            return True
        urls, index = await self.history(page)
        del self._deferred[page]
        self._stubbing = page
        try:
            await page.goto("about:blank")
            cdp = await self.context.new_cdp_session(page)
            try:
                await cdp.send("Page.resetNavigationHistory")
            finally:
                await cdp.detach()
            for url in urls:
                await page.goto(url, wait_until="commit")
            for _ in range(len(urls) - 1 - index):
                await page.go_back(wait_until="commit")
        finally:
            self._stubbing = None
        return await navigation_history(page) == (urls, index)

    def allows(self, url: str) -> bool:
        """Whether a tab may be navigated to ``url``: the session's origins, its schemes, and the blank page."""
        scheme = urlsplit(url).scheme.lower()
        return url.strip().lower() == "about:blank" or scheme in self.schemes or origin_of(url) in self.allowed_origins

    def allows_origin(self, url: str) -> bool:
        """Whether ``url`` is on one of the session's origins (what a request may reach)."""
        return origin_of(url) in self.allowed_origins

    def drain_blocked(self) -> list[str]:
        """The URLs blocked since the last call."""
        blocked, self.blocked = self.blocked, []
        return blocked + (self.gate.drain() if self.gate is not None else [])

    def drain_downloads(self) -> list[str]:
        """The downloads refused since the last call."""
        downloads, self.downloads = self.downloads, []
        return downloads

    def discard_reports(self) -> None:
        """Forget what was blocked or refused so far (what a reset or a rebuild did, not the agent)."""
        self.drain_blocked()
        self.downloads.clear()

    def check_alive(self) -> None:
        if self.crashed:
            raise BrowserCrashedError(self.crashed)
        if self.closed:
            raise BrowserCrashedError("the browser session is closed")

    async def close(self) -> None:
        """Close the context and its tabs; idempotent, and safe when the browser is already gone."""
        if self.closed:
            return
        self.host._sessions.discard(self)
        if await self.host._keep_as_spare(self):
            return
        await self._shut()
        if not self.host._sessions:  # the last open session: no spare contexts outlive it
            await self.host._drop_spares()

    async def _shut(self) -> None:
        self.closed = True
        try:
            await self.context.close()
        except Exception:  # the browser died first: nothing left to close
            pass
        if self.gate is not None:
            await self.gate.close()

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
        page.on("download", lambda download: self.downloads.append(download.url))

    def _forget(self, page: Any) -> None:
        self._deferred.pop(page, None)
        if page in self.pages:
            index = self.pages.index(page)
            self.pages.remove(page)
            if self.active >= index and self.active > 0:
                self.active -= 1

    async def _warm_tab(self, host: str) -> Any:
        """A blank tab whose renderer already serves ``host``'s site (a placeholder page of it loaded
        and left), so the tab's first real page does not wait for another renderer to start."""
        page = await self.context.new_page()
        warm = f"http://{host}:9"  # the discard port: nothing is ever sent there (the placeholder is local)
        allowed, self.allowed_origins = self.allowed_origins, {warm}
        self._stubbing = page
        try:
            await page.goto(warm + "/", wait_until="load")
        finally:
            self._stubbing, self.allowed_origins = None, allowed
        await page.goto("about:blank")
        cdp = await self.context.new_cdp_session(page)
        try:
            await cdp.send("Page.resetNavigationHistory")
        finally:
            await cdp.detach()
        return page

    def _placeholder_wanted(self, request: Any) -> bool:
        try:
            return request.is_navigation_request() and request.frame == self._stubbing.main_frame
        except Exception:  # a request without a frame (a worker's)
            return False

    def _mark_crashed(self, reason: str) -> None:
        self.crashed = self.crashed or reason

    async def _route(self, route: Any) -> None:
        url = route.request.url
        if self._stubbing is not None and self.allows_origin(url) and self._placeholder_wanted(route.request):
            await route.fulfill(status=200, content_type="text/html", body=_PLACEHOLDER, headers=_NO_STORE)
        elif self.allows_origin(url):
            await route.continue_()
        else:
            self.blocked.append(url)
            await route.abort("blockedbyclient")


class BrowserHost:
    """One Chromium per process, shared by every env, and the loop thread that drives it.

    :meth:`shared` returns the process's host (made on first use). :meth:`open_session` hands
    out isolated sessions; :meth:`close_session` recycles them. When the browser is lost (a
    crash, an OOM kill) the next :meth:`open_session` launches a fresh one.

    ``sandbox`` (default: on, unless ``AGENTGYM_CHROMIUM_SANDBOX=0``) is Chromium's own sandbox;
    turning it off is logged as a warning, since every renderer then runs with the browser
    account's full rights.
    """

    _shared: BrowserHost | None = None
    _shared_lock = threading.Lock()
    #: Blank contexts (gate, context and one tab, its renderer started) kept ready per viewport
    #: while any session is open: :meth:`open_session` takes one instead of starting its own (a
    #: fork's new context). A closed session becomes a spare again (wiped as between episodes:
    #: :meth:`BrowserSession.recycle`) while there is room; else a background task makes one, a
    #: moment after a spare was taken (not while the fork that took it still loads its pages). None
    #: are kept once the last session closes.
    spare_contexts: int = 1
    #: Seconds between taking a spare and starting to make the next (a fork closed sooner gives its
    #: context back instead: nothing is made for nothing).
    refill_delay: float = 2.0

    def __init__(
        self, executable: str | os.PathLike | None = None, *, headless: bool = True, sandbox: bool | None = None
    ):
        self.executable = find_chromium(executable)
        self.headless = headless
        self.sandbox = os.environ.get("AGENTGYM_CHROMIUM_SANDBOX", "1") != "0" if sandbox is None else sandbox
        #: (uid, gid) Chromium runs as, or None when it runs as this process's user.
        self.account = browser_account()
        self._profile: _Profile | None = None
        self.loop_thread = LoopThread("agentgym-browser")
        self._playwright: Any = None
        self._browser: Any = None
        self._launch_lock: asyncio.Lock | None = None
        self._sessions: set[BrowserSession] = set()
        self._spares: dict[tuple[int, int], list[BrowserSession]] = {}
        self._filling: dict[tuple[int, int], asyncio.Task] = {}
        self._waiting: set[tuple[int, int]] = set()  # fills still in their delay (cancelled when nothing is open)
        self._warm_host = "127.0.0.1"  # where the last session's sites are: spare tabs get a renderer for it
        self.launches = 0
        self.sessions_opened = 0
        self._closed = False

    @classmethod
    def shared(cls, executable: str | os.PathLike | None = None) -> BrowserHost:
        """The process's browser host (its executable is fixed by the first caller)."""
        with cls._shared_lock:
            if cls._shared is None or cls._shared._closed:
                cls._shared = cls(executable)
                atexit.register(cls._shared.close)
            return cls._shared

    # -------------------------------------------------------------- running code on the loop
    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self.loop_thread.run(coroutine, timeout)

    async def arun(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return await self.loop_thread.arun(coroutine)

    # -------------------------------------------------------------- sessions
    async def open_session(
        self,
        allowed_origins: Iterable[str],
        *,
        viewport: tuple[int, int] = (1280, 720),
        storage_state: dict | None = None,
        aliases: dict[str, str] | None = None,
        schemes: Iterable[str] = (),
    ) -> BrowserSession:
        """A fresh isolated context (optionally with cookies and local storage) on the shared browser.

        Its traffic goes through a :class:`NetworkGate` of its own, downloads are refused, and
        pages may navigate to the ``allowed_origins`` and to URLs of the ``schemes`` only.
        """
        viewport = (int(viewport[0]), int(viewport[1]))
        # Local storage can only be given to a new context; cookies can be added to a spare.
        session = None if storage_state and storage_state.get("origins") else self._take_spare(viewport)
        delay = self.refill_delay
        if session is None:
            session, delay = await self._new_session(viewport, storage_state), 0.0
        elif storage_state and storage_state.get("cookies"):
            await session.context.add_cookies(storage_state["cookies"])
        session.assign(allowed_origins, aliases, schemes)
        self._sessions.add(session)
        self.sessions_opened += 1
        for origin in sorted(session.allowed_origins)[:1]:
            self._warm_host = urlsplit(origin).hostname or self._warm_host
        self._refill(viewport, delay)
        return session

    @property
    def spare_count(self) -> int:
        """Spare contexts ready now (see :attr:`spare_contexts`)."""
        return sum(len(spares) for spares in self._spares.values())

    async def spares_ready(self) -> None:
        """Wait until the spare contexts being made are made (tests count contexts and processes after it)."""
        while self._filling:
            await asyncio.gather(*self._filling.values(), return_exceptions=True)

    def _take_spare(self, viewport: tuple[int, int]) -> BrowserSession | None:
        spares = self._spares.get(viewport, [])
        while spares:
            session = spares.pop()
            if (
                not (session.crashed or session.closed)
                and session._spare is not None
                and not session._spare.is_closed()
            ):
                return session
        return None

    def _room(self, viewport: tuple[int, int]) -> bool:
        return bool(self._sessions) and not self._closed and len(self._spares.get(viewport, [])) < self.spare_contexts

    def _refill(self, viewport: tuple[int, int], delay: float) -> None:
        if self.spare_contexts > 0 and viewport not in self._filling and not self._closed:
            self._filling[viewport] = asyncio.ensure_future(self._fill(viewport, delay))

    async def _fill(self, viewport: tuple[int, int], delay: float) -> None:
        try:
            self._waiting.add(viewport)
            try:
                await asyncio.sleep(delay)
            finally:
                self._waiting.discard(viewport)
            while self._room(viewport):
                session = await self._new_session(viewport, None)
                try:
                    session._spare = await session._warm_tab(self._warm_host)
                except BaseException:
                    await session._shut()
                    raise
                if not self._room(viewport):  # every session closed meanwhile, or one came back as a spare
                    await session._shut()
                    break
                self._spares.setdefault(viewport, []).append(session)
        except Exception as exc:  # a spare only saves time: the next open_session makes its own context
            log.debug("no spare browser context: %s", exc)
        finally:
            self._filling.pop(viewport, None)

    async def _keep_as_spare(self, session: BrowserSession) -> bool:
        """Wipe a closing session and keep it as a spare, if there is room and it is sound; whether it was kept."""
        viewport = session.viewport
        if session.crashed or session.recycled >= _MAX_SPARE_REUSES or not self._room(viewport):
            return False
        try:
            await session.recycle()
        except Exception:
            return False
        session.assign([])
        if not self._room(viewport):  # filled meanwhile
            return False
        self._spares.setdefault(viewport, []).append(session)
        return True

    async def _drop_spares(self) -> None:
        """Close every spare context, including those still being made."""
        current = asyncio.current_task()
        fills = [(viewport, task) for viewport, task in self._filling.items() if task is not current]
        for viewport, task in fills:
            if viewport in self._waiting:
                task.cancel()
        await asyncio.gather(*(task for _, task in fills), return_exceptions=True)
        spares, self._spares = [s for group in self._spares.values() for s in group], {}
        for session in spares:
            await session._shut()

    async def _new_session(self, viewport: tuple[int, int], storage_state: dict | None) -> BrowserSession:
        """A new context (with its own gate, reaching nothing until :meth:`BrowserSession.assign`) on the shared browser."""
        browser = await self._ensure_browser()
        gate = NetworkGate([], frame_sources=[])
        proxy = await gate.start()
        width, height = viewport
        try:
            # Playwright adds "<-loopback>" to the bypass list: loopback goes through the gate too.
            context = await browser.new_context(
                viewport={"width": width, "height": height},
                device_scale_factor=1,
                storage_state=storage_state,
                service_workers="block",
                locale="en-US",
                timezone_id="UTC",
                reduced_motion="reduce",
                accept_downloads=False,
                proxy={"server": proxy},
            )
        except BaseException:
            await gate.close()
            raise
        session = BrowserSession(self, context, [], gate=gate, viewport=viewport)
        try:
            await context.add_init_script(_NO_FORM_RESTORE_JS)
            await context.route("**/*", session._route)
        except BaseException:
            await session._shut()
            raise
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
                with requires("web"):
                    from playwright.async_api import async_playwright

                self._playwright = await async_playwright().start()
            self._browser = await self._launch()
            self._browser.on("disconnected", self._on_disconnected)
            self.launches += 1
            return self._browser

    async def _launch(self) -> Any:
        with requires("web"):
            from playwright.async_api import Error as PlaywrightError

        if self._profile is not None:  # the last browser's files (it is gone)
            self._profile.remove()
        self._profile = _Profile(self.executable, self.account)
        if not self.sandbox:
            log.warning(
                "Chromium runs without its sandbox (sandbox=False or AGENTGYM_CHROMIUM_SANDBOX=0): a "
                "compromised renderer has every right of %s",
                BROWSER_USER if self.account else "this process's user",
            )
        try:
            return await self._playwright.chromium.launch(
                executable_path=self._profile.executable,
                headless=self.headless,
                args=LAUNCH_ARGS,
                chromium_sandbox=self.sandbox,
                env=self._profile.env(),
            )
        except PlaywrightError as exc:
            # Playwright puts advice where Chromium's reason was; the reason is in its call log.
            reasons = [
                line.split("[err]", 1)[1].strip()
                for line in str(exc).splitlines()
                if "[err]" in line and ("sandbox" in line.lower() or "namespace" in line.lower())
            ]
            if not (self.sandbox and reasons):
                raise
            raise BrowserUnavailableError(
                f"Chromium's sandbox does not work on this machine: {reasons[0]} It needs unprivileged user "
                "namespaces (sysctl user.max_user_namespaces > 0, and kernel.unprivileged_userns_clone=1 or "
                "kernel.apparmor_restrict_unprivileged_userns=0 where those exist). Set "
                "AGENTGYM_CHROMIUM_SANDBOX=0 to run without it, knowing that pages then run unconfined."
            ) from None

    def _on_disconnected(self, _browser: Any) -> None:
        spares, self._spares = [s for group in self._spares.values() for s in group], {}
        for session in list(self._sessions) + spares:
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
            await self._drop_spares()
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
        if self._profile is not None:
            self._profile.remove()
