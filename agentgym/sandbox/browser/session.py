"""BrowserSession: one env's isolated browser context, its tabs and back/forward history, what its network gate blocked, and crash detection (see :mod:`agentgym.sandbox.browser`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from agentgym.sandbox.base import SandboxError
from agentgym.sandbox.browser.network import NetworkGate, origin_of

if TYPE_CHECKING:
    from agentgym.sandbox.browser.host import BrowserHost

__all__ = ["BrowserCrashedError", "BrowserSession", "navigation_history"]


# What a tab shows for a back/forward entry while BrowserSession.rebuild_history recreates the
# list; never cached, so going to the entry later loads it from its site.
_PLACEHOLDER = "<!doctype html><title></title>"
_NO_STORE = {"Cache-Control": "no-store"}


class BrowserCrashedError(SandboxError):
    """The page's renderer or the whole browser died; the episode cannot continue."""


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
        try:
            await self._recycle()
        except Exception as exc:
            if await self.host.notice_exit():  # it died under us, its exit not yet reported
                raise BrowserCrashedError("the browser process exited") from exc
            raise

    async def _recycle(self) -> None:
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
            await self._blank(page)
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
        await self._blank(page)
        return page

    async def _blank(self, page: Any) -> None:
        """Leave ``page`` on the blank page with no back/forward history."""
        await page.goto("about:blank")
        cdp = await self.context.new_cdp_session(page)
        try:
            await cdp.send("Page.resetNavigationHistory")
        finally:
            await cdp.detach()

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
