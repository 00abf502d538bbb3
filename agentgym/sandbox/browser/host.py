"""BrowserHost: the one Chromium of this process, the loop thread that drives it, and the pool of spare sessions every env opens from (see :mod:`agentgym.sandbox.browser`)."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import threading
from collections.abc import Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from agentgym.extras import requires
from agentgym.sandbox.browser.network import NetworkGate
from agentgym.sandbox.browser.process import (
    BROWSER_USER,
    LAUNCH_ARGS,
    BrowserUnavailableError,
    Profile,
    browser_account,
    find_chromium,
)
from agentgym.sandbox.browser.session import BrowserSession

__all__ = ["BrowserHost", "LoopThread"]

T = TypeVar("T")
log = logging.getLogger(__name__)

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
        self._profile: Profile | None = None
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

    async def _new_session(
        self, viewport: tuple[int, int], storage_state: dict | None, relaunch: bool = True
    ) -> BrowserSession:
        """A new context (with its own gate, reaching nothing until :meth:`BrowserSession.assign`) on the shared browser.

        A browser that exited before its exit was reported (:meth:`notice_exit`) is replaced once.
        """
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
        except BaseException as exc:
            await gate.close()
            if relaunch and isinstance(exc, Exception) and await self.notice_exit():
                return await self._new_session(viewport, storage_state, relaunch=False)
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
        self._profile = Profile(self.executable, self.account)
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

    def _on_disconnected(self, browser: Any) -> None:
        """The browser exited: its sessions and spares are crashed, and the next session launches another.

        Once per browser: one found dead by :meth:`notice_exit` reports its exit again later, when a fresh
        browser (whose sessions are sound) may already run.
        """
        if browser is not self._browser:
            return
        spares, self._spares = [s for group in self._spares.values() for s in group], {}
        for session in list(self._sessions) + spares:
            session._mark_crashed("the browser process exited")
        self._browser = None

    async def notice_exit(self) -> bool:
        """Whether the browser has exited, asked of it by a round trip; if it has, handled as its exit report is.

        Playwright reports a browser's exit asynchronously: an action can fail on a killed browser
        before the report arrives, and without this check the next episode would reuse its sessions.
        An error answer (a closed target) means exited; a browser too busy to answer in 10 s is left
        alone, since treating it as exited would crash every live session on it.
        """
        browser = self._browser
        if browser is None:
            return True
        try:
            cdp = await browser.new_browser_cdp_session()
            try:
                await asyncio.wait_for(cdp.send("Browser.getVersion"), 10)
            finally:
                with contextlib.suppress(Exception):
                    await cdp.detach()
        except TimeoutError:
            return False
        except Exception:
            self._on_disconnected(browser)
            return True
        return False

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
