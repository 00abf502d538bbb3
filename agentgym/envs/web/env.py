"""WebEnv: the base class of browser environments — a Playwright session per env, the observation tree, the action mini-language, and branching of browser state.

A subclass says which sites a task may reach, how a task starts and how it is judged, with the
author's hooks every env family shares (:class:`agentgym.core.AgentEnv`; here ``_setup`` and ``_grade`` are
coroutines on the browser loop, and the browser session is :attr:`WebEnv.session`)::

    class MyWebEnv(WebEnv):
        def task_ids(self): ...
        def _origins(self): return [self.app.origin]          # everything else is blocked
        async def _setup(self, task_id):                       # the site at the task's start; return the goal
            self.app.reset()
            await self.session.new_page(self.app.origin + "/")
            return "Buy the cheapest blue mug."
        async def _grade(self, answer):                        # after every turn (answer: None until answer())
            return Verdict(reward=1.0, success=True, done=True) if answer is not None and ... else None

The verdict's ``details`` are the final step's ``info["grade"]``. Server-side state (an app's
SQLite database) goes in and out of snapshots through ``branch_attributes`` or
``_branch_state`` / ``_load_branch_state``.

**Branching.** A snapshot holds the site state, the context's cookies and local storage, every
tab's URL and DOM state (element ids, form values, focus, scroll) and the action prefix since
reset. :meth:`fork` rebuilds it in a fresh context (a spare one the browser host keeps ready):
site state back, each tab's current page reloaded, DOM state reapplied — and checked: if a
reloaded tab's DOM or text differs from the captured one (a page built by client-side script, a
tab that was stale when the state changed), the fork instead replays the action prefix from the
task's start, which is exact. The other back/forward entries are only recorded; the first
``go_back``/``go_forward`` that needs them puts them into Chromium (placeholder documents: no
request, no script) and, should Chromium build another list, replays the episode so far instead. Envs whose pages keep their
state in JavaScript (MiniWoB++) set ``fork_by_replay = True`` and always replay. Snapshot
metadata records which way each fork went. All of it is plain data (an app's database is
serialised), so ``export_snapshot`` carries it as bytes; an env that imports them serves its
sites on origins of its own, and the captured URLs move to them as they do for every fork.
"""

from __future__ import annotations

import abc
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, cast, final

import numpy as np

from agentgym.actions import ParsedAction, ToolCall, ToolSpec, format_error
from agentgym.core import AgentEnv, Outcome, Verdict
from agentgym.envs.web.actions import TERMINAL_ACTIONS, ActionError, perform, web_tools
from agentgym.envs.web.observation import CAPTURE_DOM_JS, OBSERVE_JS, RESTORE_DOM_JS, PageView, decode_png, draw_marks
from agentgym.sandbox.browser import BrowserCrashedError, BrowserHost, BrowserSession, origin_of

__all__ = ["WebEnv", "Verdict"]

_OBSERVE_ATTEMPTS = 5
# A recycled context keeps its renderer, whose memory grows with the pages it has seen (about
# 1 GB after hundreds of episodes); a fresh one now and then bounds it.
_MAX_RECYCLES = 50


@dataclass
class _TabState:
    """One tab: its back/forward history (URLs, the current index) and the current page's DOM state."""

    history: list[str]
    index: int
    dom: dict

    @property
    def url(self) -> str:
        return self.history[self.index]


@dataclass
class _WebState:
    """WebEnv's part of a snapshot."""

    goal: str
    prefix: list[list[tuple[str, dict]]]
    last_error: str | None
    branch_state: Any
    storage: dict
    tabs: list[_TabState]
    active: int
    origins: list[str]


class WebEnv(AgentEnv):
    """Base class of browser envs (see the module docstring).

    Args:
        max_turns: the episode is truncated after this many replies.
        screenshot: observations carry ``"image"``, the page as an H×W×3 uint8 array.
        set_of_marks: the screenshot has each shown element's box and id drawn on it (implies ``screenshot``).
        screen_size: (width, height) of the browser's viewport in CSS pixels (default: the class's
            ``default_screen_size``).
        pixel_actions: offer ``mouse_click``/``mouse_drag``/``keyboard_type`` for screenshot-only agents.
        action_timeout: seconds an action may wait for its element (navigations get three times that).
        max_page_chars: the page tree is cut after this many characters (the observation says so).
        chromium: the Chromium executable (default: ``$AGENTGYM_CHROMIUM`` or ``chromium`` on PATH).
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi", "rgb_array"]}
    #: Viewport (width, height) in CSS pixels; screenshots have this size.
    default_screen_size: ClassVar[tuple[int, int]] = (1280, 720)
    #: Whether forks always replay the action prefix (pages whose state lives in JavaScript).
    fork_by_replay: ClassVar[bool] = False

    def __init__(
        self,
        *,
        max_turns: int = 30,
        screenshot: bool = False,
        set_of_marks: bool = False,
        screen_size: tuple[int, int] | None = None,
        pixel_actions: bool = True,
        action_timeout: float = 3.0,
        max_page_chars: int = 40_000,
        chromium: str | None = None,
        render_mode: str | None = None,
    ):
        self.screen_size = cast(tuple[int, int], tuple(screen_size or self.default_screen_size))
        width, height = self.screen_size
        super().__init__(
            max_turns=max_turns,
            render_mode=render_mode,
            image_shape=(height, width) if screenshot or set_of_marks else None,
        )
        self.screenshot = screenshot or set_of_marks
        self.set_of_marks = set_of_marks
        self.pixel_actions = pixel_actions
        self.action_timeout = action_timeout
        self.max_page_chars = max_page_chars
        self._tools = web_tools(pixel=pixel_actions)
        self._host = BrowserHost.shared(chromium)
        #: The browser session of the current episode (its pages, context and reports), for ``_setup`` and ``_grade``.
        self.session: BrowserSession | None = None
        self._goal = ""
        self._prefix: list[list[tuple[str, dict]]] = []
        self._last_error: str | None = None
        self._last_view: PageView | None = None
        self.fork_mode: str | None = None  # how this env was built by fork: "restore" or "replay"
        self._pending_task: str | None = None

    # ------------------------------------------------------------------ the author's hooks
    @abc.abstractmethod
    def _origins(self) -> list[str]:
        """The origins the current task may load (everything else is blocked and reported)."""

    @abc.abstractmethod
    async def _setup(self, task_id: str) -> str:
        """Put the sites at the task's start (server-side state too) and open its start page(s) in :attr:`session`; return the goal."""

    @abc.abstractmethod
    async def _grade(self, answer: str | None) -> Verdict | None:
        """The verdict after a turn (``answer`` is the text of ``answer()``, if it was called), or None to go on.

        An ``answer()`` without a verdict ends the episode with reward 0.
        """

    def _aliases(self) -> dict[str, str]:
        """Real origin → the stable origin shown to the agent (sites run on free ports; forks on other ones)."""
        return {}

    def _navigation_schemes(self) -> frozenset[str]:
        """URL schemes besides the origins' that the current task's tabs and frames may load, e.g. ``{"blob"}``.

        None by default: ``data:`` and ``blob:`` documents are agent-writable pages, so a task
        gets them only by declaring that it needs them (as subresources they always load).
        """
        return frozenset()

    # ------------------------------------------------------------------ AgentEnv and backend hooks
    def tools(self) -> list[ToolSpec]:
        return self._tools

    @final
    def _backend_start(self, task_id: str) -> dict:
        self._run(self._start_fresh(task_id))
        return self._observe()

    @final
    def _act(self, parsed: ParsedAction) -> Outcome:
        # A reply without a usable call still costs the turn and still shows the page.
        return self._run(self._turn(parsed.calls, None if parsed.calls else parsed.error or "no action found"))

    @final
    def _backend_capture(self) -> tuple[_WebState, Callable[[], None] | None]:
        state = self._run(self._capture_browser(self._branch_state()))
        return state, None

    @final
    def _backend_load(self, payload: _WebState) -> None:
        self._run(self._rebuild(payload))

    @final
    def _backend_close(self) -> None:
        if self.session is not None:
            session, self.session = self.session, None
            try:
                self._run(session.close(), timeout=30)
            except Exception:
                pass

    @final
    def _backend_metadata(self, payload: _WebState) -> dict:
        return {"urls": [tab.url for tab in payload.tabs], "prefix_turns": len(payload.prefix)}

    def render(self) -> Any:
        if self.render_mode == "rgb_array":
            return self._run(self._screenshot())
        return super().render()

    # ------------------------------------------------------------------ running on the browser loop
    def _run(self, coroutine: Any, timeout: float | None = None) -> Any:
        # A hung page (an endless script) must not hang the caller: the step becomes an env error.
        return self._host.run(coroutine, timeout or max(60.0, self.action_timeout * 20))

    async def _start_fresh(self, task_id: str) -> None:
        session = self.session
        recycled = False
        if (
            session is not None
            and not session.crashed
            and session.recycled < _MAX_RECYCLES
            and session.allowed_origins == {origin_of(origin) for origin in self._origins()}
            and session.schemes == self._navigation_schemes()
        ):
            # A fresh context would cost a renderer process start; a browser that died under it needs one.
            with contextlib.suppress(BrowserCrashedError):
                await session.recycle()
                recycled = True
        if not recycled:
            await self._close_session()
            self.session = await self._host.open_session(
                self._origins(), viewport=self.screen_size, aliases=self._aliases(), schemes=self._navigation_schemes()
            )
        self._goal = await self._setup(task_id)
        self._prefix = []
        self._last_error = None
        self.session.discard_reports()

    async def _close_session(self) -> None:
        if self.session is not None:
            session, self.session = self.session, None
            await session.close()

    async def _turn(self, calls: list[ToolCall], problem: str | None = None) -> Outcome:
        """Perform the reply's calls in order, stopping at the first error or at ``answer``; judge; observe."""
        session = self.session
        session.check_alive()
        performed: list[tuple[str, dict]] = []
        error, answer = problem, None
        for call in calls:
            if not call.ok:
                error = call.error
                break
            arguments = self._normalise(call)
            if call.name in _HISTORY_STEPS:
                await self._ensure_history(_HISTORY_STEPS[call.name], performed)
                session = self.session  # a replay may have started another
            performed.append((call.name, arguments))
            try:
                await perform(
                    session, call.name, arguments, timeout_ms=self.action_timeout * 1000, viewport=self.screen_size
                )
            except ActionError as exc:
                error = f"{call.name}: {exc}"
                break
            session.check_alive()
            if call.name in TERMINAL_ACTIONS:
                answer = str(arguments.get("text", ""))
                break
        self._prefix.append(performed)
        self._last_error = error
        verdict = await self._grade(answer)
        if verdict is None and answer is not None:
            verdict = Verdict(0.0, False, True)
        text, image = await self._aobserve()
        if error and not any(c.ok for c in calls):
            text = format_error(error, self.tools()) + "\n\n" + text
        if verdict is None:
            outcome = Outcome(text, error=error)
        else:
            outcome = verdict.outcome(f"{verdict.message}\n\n{text}" if verdict.message else text, error=error)
        outcome.image = image
        return outcome

    def _normalise(self, call: ToolCall) -> dict:
        # The schema accepts 12.0 for an integer; Playwright and list indexing want 12.
        arguments = dict(call.arguments)
        spec = next(tool for tool in self._tools if tool.name == call.name)
        for key, schema in spec.properties.items():
            if schema.get("type") == "integer" and isinstance(arguments.get(key), float):
                arguments[key] = int(arguments[key])
        return arguments

    # ------------------------------------------------------------------ observing
    def _observe(self) -> dict:
        text, image = self._run(self._aobserve())
        observation = {"text": text}
        if image is not None:
            observation["image"] = image
        return observation

    async def _aobserve(self) -> tuple[str, np.ndarray | None]:
        session = self.session
        session.check_alive()
        view = await self._view(session.page)
        self._last_view = view
        tabs = []
        for index, page in enumerate(session.pages):
            title = view.title if index == session.active else await page.title()
            marker = " (focused)" if index == session.active else ""
            tabs.append(f"[{index}] {json.dumps(title)} {page.url}{marker}")
        header = [
            f"Goal: {self._goal}",
            "",
            f"URL: {view.url}",
            "Tabs: " + " | ".join(tabs),
            f"Focused element: [{view.focused}]" if view.focused else "Focused element: none",
        ]
        if self._last_error:
            header.append(f"Last action error: {self._last_error}")
        blocked = session.drain_blocked()
        if blocked:
            header.append("Blocked requests (outside this task's sites): " + _listed(blocked))
        downloads = session.drain_downloads()
        if downloads:
            header.append("Downloads refused (files are never saved): " + _listed(downloads))
        image = None
        if self.screenshot:
            image = await self._screenshot()
            if self.set_of_marks:
                image = draw_marks(image, view.boxes)
        return session.display("\n".join(header)) + "\n\n" + view.tree, image

    async def _view(self, page: Any) -> PageView:
        from playwright.async_api import Error as PlaywrightError

        for attempt in range(_OBSERVE_ATTEMPTS):
            try:
                raw = await page.evaluate(OBSERVE_JS, self.max_page_chars)
                break
            except PlaywrightError as exc:
                # A navigation the action started can commit after the action returned (a form
                # submitted under load); the page being observed is then gone: observe the new one.
                if "context was destroyed" not in str(exc) or attempt == _OBSERVE_ATTEMPTS - 1:
                    raise
                await page.wait_for_load_state("load", timeout=self.action_timeout * 3000)
        return PageView(
            url=page.url,
            title=raw["title"],
            lines=raw["lines"],
            boxes=raw["boxes"],
            focused=raw["focused"],
            truncated=raw["truncated"],
            scroll=tuple(raw["scroll"]),
        )

    async def _screenshot(self) -> np.ndarray:
        return decode_png(await self._screenshot_png())

    async def _screenshot_png(self) -> bytes:
        # caret and animations off: the same state must give the same pixels (fork equality).
        return await self.session.page.screenshot(type="png", animations="disabled", caret="hide")

    # ------------------------------------------------------------------ branching
    async def _capture_browser(self, branch_state: Any) -> _WebState:
        session = self.session
        session.check_alive()
        tabs = [await self._capture_tab(page) for page in session.pages]
        storage = await session.context.storage_state()
        return _WebState(
            self._goal,
            [list(turn) for turn in self._prefix],
            self._last_error,
            branch_state,
            storage,
            tabs,
            session.active,
            list(self._origins()),
        )

    async def _capture_tab(self, page: Any) -> _TabState:
        urls, index = await self.session.history(page)
        return _TabState(urls, index, await page.evaluate(CAPTURE_DOM_JS))

    async def _rebuild(self, state: _WebState) -> None:
        # A fork serves its sites on ports of its own: every captured URL moves to the new origins.
        state = _moved(state, dict(zip(state.origins, self._origins())))
        task_id = self._pending_task
        # A fork that replays calls _setup afterwards, so state that the task's start depends on
        # (an instance seed) survives, and state that replay rebuilds is reset.
        self._load_branch_state(state.branch_state)
        if await self._restore(state):
            self.fork_mode = "restore"
        else:
            await self._replay(task_id, state.prefix)
            self.fork_mode = "replay"
        self._goal = state.goal
        self._prefix = [list(turn) for turn in state.prefix]
        self._last_error = state.last_error

    async def _restore(self, state: _WebState) -> bool:
        """Put the captured state back without replaying; False if it would not be exact (the fork then replays)."""
        return not self.fork_by_replay and await self._restore_tabs(state)

    async def _restore_tabs(self, state: _WebState) -> bool:
        """Reload every tab's current page into the captured site state and DOM state; False if any tab would come back different.

        Only the current entry of each tab is loaded; the entries before and after it are
        recorded (:meth:`BrowserSession.defer_history`) and put into Chromium when the agent
        first goes back or forward past it (:meth:`_ensure_history`).
        """
        if not all(_rebuildable(tab.history) for tab in state.tabs):
            return False
        await self._close_session()
        session = await self._host.open_session(
            self._origins(),
            viewport=self.screen_size,
            storage_state=state.storage,
            aliases=self._aliases(),
            schemes=self._navigation_schemes(),
        )
        self.session = session
        for tab in state.tabs:
            page = await session.new_page()
            if tab.history != ["about:blank"]:
                await page.goto(tab.url, wait_until="load")
                session.defer_history(page, tab.history[: tab.index], tab.history[tab.index + 1 :])
            # A page whose scripts keep state (or a server that counted the visit) reloads differently: check.
            rebuilt = await session.history(page)
            if rebuilt != (tab.history, tab.index) or not await page.evaluate(RESTORE_DOM_JS, tab.dom):
                return False
        session.active = state.active
        await session.page.bring_to_front()
        session.discard_reports()
        return True

    async def _ensure_history(self, step: int, done: list[tuple[str, dict]]) -> None:
        """Before going ``step`` (-1 back, +1 forward): put a restored tab's recorded entries into Chromium.

        Should Chromium build another list than the recorded one, the whole episode is replayed
        instead (the turns so far and ``done``, this turn's calls before this one), which is exact.
        """
        session = self.session
        page = session.page
        from playwright.async_api import Error as PlaywrightError

        if not await session.needs_history(page, step):
            return
        try:
            if await session.rebuild_history(page):
                return
        except PlaywrightError:
            # Chromium can swap the tab's renderer under a history call ("Not attached to an active
            # page", seen under load): the replay below is exact whatever state the tab was left in
            pass
        goal, prefix, last_error = self._goal, [list(turn) for turn in self._prefix], self._last_error
        await self._replay(self._episode.task_id, prefix, unobserved=done)
        self._goal, self._prefix, self._last_error = goal, prefix, last_error
        self.fork_mode = "replay"

    async def _replay(
        self, task_id: str, prefix: list[list[tuple[str, dict]]], unobserved: list[tuple[str, dict]] | None = None
    ) -> None:
        """Rebuild the state exactly: start the task afresh and perform every recorded action again.

        ``unobserved`` are calls of a turn still under way (performed after ``prefix``, with no
        observation after them).
        """
        await self._start_fresh(task_id)
        await self._view(self.session.page)  # reset observed the start page
        turns = [(turn, True) for turn in prefix] + ([(unobserved, False)] if unobserved else [])
        for turn, observed in turns:
            for name, arguments in turn:
                try:
                    await perform(
                        self.session,
                        name,
                        arguments,
                        timeout_ms=self.action_timeout * 1000,
                        viewport=self.screen_size,
                    )
                except ActionError:
                    break  # the original turn stopped here too
            if observed:  # the original observed after every turn, assigning ids to new elements in order
                await self._view(self.session.page)
        self.session.discard_reports()

    def restore(self, snapshot: Any) -> None:
        # _rebuild needs the task, which the base class installs only after _backend_load.
        self._pending_task = snapshot.task_id
        super().restore(snapshot)


def _listed(urls: list[str]) -> str:
    return ", ".join(urls[:5]) + (f" and {len(urls) - 5} more" if len(urls) > 5 else "")


#: The actions that move along a tab's back/forward list, and which way.
_HISTORY_STEPS = {"go_back": -1, "go_forward": 1}


def _rebuildable(history: list[str]) -> bool:
    """Whether navigating ``history``'s URLs in order gives that list: http(s) only, and no URL twice in a row
    (Chromium turns a navigation to the current URL, e.g. after a form's POST-redirect-GET, into a replacement).
    """
    if history == ["about:blank"]:
        return True
    return all(url.startswith(("http://", "https://")) for url in history) and all(
        a != b for a, b in zip(history, history[1:])
    )


def _moved(state: _WebState, origins: dict[str, str]) -> _WebState:
    """``state`` with every old origin in URLs, local storage and recorded actions replaced by the new one."""
    moves = {old: new for old, new in origins.items() if old != new}
    if not moves:
        return state

    def move(value: Any) -> Any:
        if isinstance(value, str):
            for old, new in moves.items():
                value = value.replace(old, new)
            return value
        if isinstance(value, list):
            return [move(item) for item in value]
        if isinstance(value, tuple):
            return tuple(move(item) for item in value)
        if isinstance(value, dict):
            return {key: move(item) for key, item in value.items()}
        return value

    tabs = [_TabState(move(tab.history), tab.index, tab.dom) for tab in state.tabs]
    storage = dict(state.storage, origins=move(state.storage.get("origins", [])))
    return _WebState(
        state.goal,
        move(state.prefix),
        state.last_error,
        state.branch_state,
        storage,
        tabs,
        state.active,
        [origins.get(origin, origin) for origin in state.origins],
    )
