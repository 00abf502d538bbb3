"""MiniWoBEnv: the MiniWoB++ tasks of the ``miniwob`` package, served on loopback and judged by each task's own JavaScript.

``gymnasium.make("agentgym/web.miniwob.click-button-v0")`` is one task; every task page of the
installed ``miniwob`` package (``html/miniwob/*.html``, over 100) is registered.
``MiniWoBEnv(tasks=...)`` takes several (ids such as ``"click-button"``, or a pattern such as
``"click-*"``; default: all), and each reset runs one of them. The pages and
their assets come from the package itself (:mod:`importlib.resources`), served by one static
loopback server per process and shown to the agent as ``http://miniwob.local``.

**An episode** starts the way the package's own environment starts one
(``miniwob/selenium_instance.py``: ``begin_task``): load the task page, wait for its sync
screen, ``Math.seedrandom(seed)``, ``core.setDataMode(mode)``, ``core.startEpisodeReal()``, wait
for ``WOB_TASK_READY``. The goal is the task's utterance (``core.getUtterance()``, the yellow
query box). Pages are laid out in the package's window size (780×437, headless Chrome's inner
size, so that popups placed by jQuery UI land where they land there); screenshots show the task's
160×210 area (query included), cropped as the package crops its own, and mouse coordinates are
the same as the package's ``CLICK_COORDS``. The HUD that core.js draws beside the task (last
reward, countdown) is hidden.

**Seeds.** The instance seed (the argument of ``Math.seedrandom``) is drawn from the env's
``np_random``, so ``reset(seed=s)`` reproduces the instance; ``reset(options={"instance_seed": n})``
uses ``n`` itself (to compare with the package's ``env.reset(seed=n)``); :attr:`instance_seed`
is the one in use. Snapshots carry it, so a fork rebuilds the same instance: for the tasks whose
state is their form fields (:attr:`MiniWoBEnv.state_fork_tasks`) by starting it and putting the
fields, the clicks core.js drew and the pointer back (checked; a finished episode replays), for
the others, whose state lives in script variables, by replaying the action prefix
(``fork_by_replay``).

**Reward.** The package's default reward processor (``miniwob.reward.get_original_reward``) is
``WOB_REWARD_GLOBAL``, which core.js scales by the time left for most tasks
(``reward * (1 - elapsed / EPISODE_MAX_TIME)``) — time-dependent, and meaningless for an LLM
agent that thinks for seconds per step. This env's reward is therefore the **raw reward**
(``WOB_RAW_REWARD_GLOBAL``, the package's ``get_raw_reward``): in [-1, 1], 0 until the task says
done, partial for some tasks. ``success`` is ``raw reward == 1`` (the package's
``get_binary_reward``). The episode terminates when the task sets ``WOB_DONE_GLOBAL``;
``info["grade"]`` then carries ``raw_reward``, ``env_reward`` (the time-scaled one) and ``reason``. ``answer()``
gives up (reward 0). Only the task page as it was started is judged: a tab that navigated
elsewhere (or reloaded the task, or opened another one) never ends the episode.

**Time limit.** core.js ends every episode after ``core.EPISODE_MAX_TIME`` (10 s by default, up
to 30 s per task) with reward -1. ``episode_time_limit=None`` (the default, as in BrowserGym)
disables that timer; a number of seconds sets it; ``"task"`` keeps each task's own limit, as the
``miniwob`` package does.
"""

from __future__ import annotations

import asyncio
import mimetypes
import threading
import uuid
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np
from aiohttp import web
from gymnasium import spaces

from agentgym.core import Verdict, select_tasks
from agentgym.envs.web.env import WebEnv
from agentgym.envs.web.observation import RESTORE_DOM_JS
from agentgym.envs.web.site import app_loop
from agentgym.extras import requires
from agentgym.task import Task

__all__ = ["MiniWoBEnv", "miniwob_tasks", "MINIWOB_ORIGIN"]

#: The origin the agent sees (the real one is a free loopback port).
MINIWOB_ORIGIN = "http://miniwob.local"


def html_dir() -> Path:
    """The ``html/`` folder of the installed ``miniwob`` package (core/, common/, miniwob/)."""
    with requires("web"):
        return Path(str(files("miniwob") / "html"))


def miniwob_tasks() -> list[str]:
    """Every MiniWoB++ task of the installed package (``html/miniwob/<task>.html``), sorted."""
    return sorted(path.stem for path in (html_dir() / "miniwob").glob("*.html"))


class _StaticServer:
    """The package's html/ folder over HTTP on 127.0.0.1 (one per process; the files never change)."""

    _origin: str | None = None
    _lock = threading.Lock()

    @classmethod
    def origin(cls) -> str:
        with cls._lock:
            if cls._origin is None:
                cls._origin = app_loop().run(cls._start(html_dir().resolve()), timeout=30)
            return cls._origin

    @staticmethod
    async def _start(root: Path) -> str:
        async def serve(request: web.Request) -> web.StreamResponse:
            path = (root / request.match_info["path"]).resolve()
            if not path.is_relative_to(root) or not path.is_file():
                raise web.HTTPNotFound()
            content_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            if content_type.startswith("text/") or content_type.endswith("javascript"):
                # Some pages declare no charset (unicode-test): over HTTP Chromium would read them as windows-1252.
                content_type += "; charset=utf-8"
            return web.FileResponse(path, headers={"Content-Type": content_type})

        app = web.Application()
        app.router.add_get("/{path:.*}", serve)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{cast(asyncio.Server, site._server).sockets[0].getsockname()[1]}"


# Starts an episode the way miniwob's SeleniumInstance.begin_task does (seed, data mode,
# startEpisodeReal), with the episode timer set or disabled, and the HUD beside the task hidden.
_START_JS = r"""
({seed, mode, limitMs, disableTimer, token}) => {
  Math.seedrandom(seed);
  core.setDataMode(mode);
  if (limitMs !== null) core.EPISODE_MAX_TIME = limitMs;
  core.startEpisodeReal();
  if (disableTimer) {
    // endEpisode only rewards while EP_TIMER is non-null: a placeholder keeps that true forever.
    clearTimeout(core.EP_TIMER);
    core.EP_TIMER = 'agentgym: time limit disabled';
    core.clearTimer();
  }
  core.hideDisplay();
  window.__agentgymEpisode = token;
  // What core.js draws for each click (a dot on its click canvas, in the task area) and where the
  // pointer is (hover styles): state a fork puts back, since no form field holds it.
  window.__agentgymClicks = [];
  window.__agentgymPointer = null;
  document.body.addEventListener('click', (e) => {
    if (e.target !== core.cover_div && e.isTrusted && e.pageX <= 160 && e.pageY <= 210) window.__agentgymClicks.push([e.pageX, e.pageY]);
  });
  for (const kind of ['mousemove', 'mousedown', 'mouseup']) document.addEventListener(kind, (e) => {
    if (e.isTrusted) window.__agentgymPointer = [e.clientX, e.clientY];
  }, true);
}
"""

# A started episode's state besides its form fields (see MiniWoBEnv._restore), or null on another page.
_CAPTURE_STATE_JS = r"""
(token) => {
  if (window.__agentgymEpisode !== token) return null;
  const all = Array.from(document.querySelectorAll('*'));
  return {core: [!!WOB_DONE_GLOBAL, WOB_EPISODE_ID, Number(WOB_RAW_REWARD_GLOBAL)],
          clicks: window.__agentgymClicks.slice(), pointer: window.__agentgymPointer,
          tampered: all.map((el, i) => [i, el.dataset ? el.dataset.tampered : undefined]).filter(([, v]) => v !== undefined)};
}
"""

_CORE_STATE_JS = "() => [!!WOB_DONE_GLOBAL, WOB_EPISODE_ID, Number(WOB_RAW_REWARD_GLOBAL)]"

# Draws the captured clicks again, as core.canvasDrawClick drew them, and marks the clicked elements.
_RESTORE_STATE_JS = r"""
(state) => {
  for (const [x, y] of state.clicks) {
    core.prepareCanvas();
    const ctx = core.clickTrackCtx;
    ctx.beginPath();
    ctx.arc(x, y, 5, 0, 2 * Math.PI);
    ctx.fillStyle = "rgba(100, 100, 255, 0.8)";
    ctx.fill();
  }
  window.__agentgymClicks = state.clicks.slice();
  const all = Array.from(document.querySelectorAll('*'));
  for (const [i, value] of state.tampered) all[i].dataset.tampered = value;
}
"""

# The task's verdict, read only from the page this episode started (a reload or another page lacks the token).
_STATE_JS = r"""
(token) => {
  if (window.__agentgymEpisode !== token || typeof WOB_DONE_GLOBAL === 'undefined') return null;
  return {done: !!WOB_DONE_GLOBAL, raw: Number(WOB_RAW_REWARD_GLOBAL), reward: Number(WOB_REWARD_GLOBAL),
          reason: WOB_REWARD_REASON === null || WOB_REWARD_REASON === undefined ? null : String(WOB_REWARD_REASON)};
}
"""


class MiniWoBEnv(WebEnv):
    """MiniWoB++ tasks (see the module docstring): ``MiniWoBEnv(tasks="click-button")``."""

    kind = "web.miniwob"
    #: The window the package's headless Chrome lays pages out in (its inner size): jQuery UI keeps
    #: dialogs and menus inside the window, so a smaller one would move them (and the coordinates).
    default_screen_size = (780, 437)
    #: The task's area, query included (``#wrap``): what screenshots show, as the package crops them.
    task_area = (160, 210)
    fork_by_replay = True
    #: Tasks whose state, once started, is only in their form fields (values, checks, choices) and
    #: what core.js tracks for every task (clicks drawn, elements clicked, the episode's end): their
    #: handlers read the fields when Submit is clicked. A fork of one of them starts the same
    #: instance (same seed, so the same problem and random state) and puts that state back, checked
    #: like any restore; other tasks keep state in script variables, and their forks replay.
    state_fork_tasks: ClassVar[frozenset[str]] = frozenset(
        {
            "choose-list",
            "click-checkboxes",
            "click-checkboxes-soft",
            "click-checkboxes-transfer",
            "click-option",
            "enter-password",
            "enter-text",
            "enter-text-2",
            "login-user",
            "text-transform",
        }
    )

    def __init__(
        self,
        tasks: str | Sequence[str] | None = None,
        *,
        episode_time_limit: float | str | None = None,
        data_mode: str = "train",
        max_turns: int = 30,
        **kwargs: Any,
    ):
        try:
            self._task_ids = select_tasks(miniwob_tasks(), tasks)
        except ValueError as exc:
            raise ValueError(
                f"{exc} among the MiniWoB++ tasks; see agentgym.envs.web.miniwob.miniwob_tasks()"
            ) from None
        if not (
            episode_time_limit is None
            or episode_time_limit == "task"
            or (isinstance(episode_time_limit, (int, float)) and episode_time_limit > 0)
        ):
            raise ValueError(f"episode_time_limit must be None, 'task' or seconds > 0, got {episode_time_limit!r}")
        super().__init__(max_turns=max_turns, **kwargs)
        if self.screenshot:
            width, height = self.task_area
            self.observation_space = spaces.Dict(
                {
                    "text": cast(spaces.Dict, self.observation_space)["text"],
                    "image": spaces.Box(0, 255, (height, width, 3), np.uint8),
                }
            )
        self.episode_time_limit = episode_time_limit
        self.data_mode = data_mode
        self.origin = _StaticServer.origin()
        #: The seed of the current instance (``Math.seedrandom``'s argument).
        self.instance_seed: int | None = None
        self._token = ""
        self._task_page: Any = None

    def task_url(self, task_id: str) -> str:
        return f"{self.origin}/miniwob/{task_id}.html"

    def task_ids(self) -> list[str]:
        return self._task_ids

    def tasks(self) -> list[Task]:
        """The selected tasks, each reported under its own name; goals are drawn per episode (the utterance), and no task has a reference solution."""
        return [Task(task_id, category=task_id) for task_id in self._task_ids]

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start an instance: its seed is ``options["instance_seed"]`` if given, else drawn from ``np_random``."""
        options = dict(options or {})
        requested = options.pop("instance_seed", None)
        self.instance_seed = None if requested is None else int(requested)  # None: _setup draws one
        return super().reset(seed=seed, options=options)

    # ------------------------------------------------------------------ WebEnv hooks
    def _origins(self) -> list[str]:
        return [self.origin]

    def _aliases(self) -> dict[str, str]:
        return {self.origin: MINIWOB_ORIGIN}

    async def _setup(self, task_id: str) -> str:
        if self.instance_seed is None:  # a reset's start (a replay keeps the snapshot's instance)
            self.instance_seed = int(self.np_random.integers(2**31 - 1))
        timeout_ms = max(10_000, self.action_timeout * 1000 * 3)
        page = await self.session.new_page(self.task_url(task_id))
        # window.onload shows the sync screen ("START"); the package waits for it the same way.
        await page.wait_for_function("() => typeof core !== 'undefined' && core.cover_div !== null", timeout=timeout_ms)
        limit = self.episode_time_limit
        self._token = uuid.uuid4().hex
        await page.evaluate(
            _START_JS,
            {
                "seed": int(self.instance_seed),
                "mode": self.data_mode,
                "limitMs": int(limit * 1000) if isinstance(limit, (int, float)) else None,
                "disableTimer": limit is None,
                "token": self._token,
            },
        )
        await page.wait_for_function("() => WOB_TASK_READY", timeout=timeout_ms)
        # Let the first frame of the new problem render before anyone looks (screenshots must be exact).
        await page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        self._task_page = page
        return await page.evaluate("() => core.getUtterance()")

    async def _grade(self, answer: str | None) -> Verdict | None:
        page = self._task_page
        if page is None or page.is_closed():
            return None
        try:
            state = await page.evaluate(_STATE_JS, self._token)
        except Exception:  # the tab is mid-navigation: it left the task page
            state = None
        if not state or not state["done"]:
            return None
        raw = state["raw"]
        return Verdict(
            raw, raw == 1.0, details={"raw_reward": raw, "env_reward": state["reward"], "reason": state["reason"]}
        )

    async def _screenshot_png(self) -> bytes:
        width, height = self.task_area  # the task, as the package crops its screenshots
        return await self.session.page.screenshot(
            type="png", animations="disabled", caret="hide", clip={"x": 0, "y": 0, "width": width, "height": height}
        )

    async def _capture_tab(self, page: Any) -> Any:
        tab = await super()._capture_tab(page)
        if page is self._task_page:
            tab.dom["miniwob"] = await page.evaluate(_CAPTURE_STATE_JS, self._token)
        return tab

    async def _restore(self, state: Any) -> bool:
        """Start the same instance and put its form fields and core.js's state back (tasks of :attr:`state_fork_tasks` only)."""
        task_id = self._pending_task
        tab = state.tabs[0] if len(state.tabs) == 1 else None
        saved = tab.dom.get("miniwob") if tab is not None else None
        if task_id not in self.state_fork_tasks or saved is None or tab.history != [self.task_url(task_id)]:
            return False
        await self._start_fresh(task_id)
        page = self.session.page
        # An episode that ended (or another page) is not the started instance: replay it.
        if await page.evaluate(_CORE_STATE_JS) != saved["core"] or not await page.evaluate(RESTORE_DOM_JS, tab.dom):
            return False
        await page.evaluate(_RESTORE_STATE_JS, saved)
        if saved["pointer"] is not None:
            await page.mouse.move(*saved["pointer"])
        self.session.discard_reports()
        return True

    def _branch_state(self) -> Any:
        return self.instance_seed

    def _load_branch_state(self, state: Any) -> None:
        self.instance_seed = state
