"""WebAppEnv: tasks on a self-hosted multi-page app (shop, webmail, wiki) — server state in SQLite, judged on the agent's answer, the URL and the database.

``gymnasium.make("agentgym/web.shop-v0")`` starts the app on a loopback port of its own; every
reset restores the seeded database, logs the task's user in and opens the start page. The
episode ends when the agent calls ``answer(text)`` (an empty answer for tasks that ask no
question); the task's evaluator then decides success (reward 1) or failure (reward 0). Snapshots
carry a copy of the database, so forks branch the server as well as the browser.
"""

from __future__ import annotations

import importlib
from functools import cached_property
from typing import Any

from agentgym.envs.web.env import Verdict, WebEnv
from agentgym.envs.web.site import WebApp
from agentgym.envs.web.tasks import EvalContext, WebTask
from agentgym.sandbox.browser import BrowserSession, origin_of

__all__ = ["WebAppEnv", "APPS", "app_tasks"]

#: App name → module exposing ``App`` (a :class:`WebApp`) and ``tasks()`` (its :class:`WebTask` list).
APPS = {
    "shop": "agentgym.envs.web.apps.shop",
    "mail": "agentgym.envs.web.apps.mail",
    "wiki": "agentgym.envs.web.apps.wiki",
}

_task_cache: dict[str, dict[str, WebTask]] = {}


def app_tasks(app: str) -> dict[str, WebTask]:
    """The tasks of an app by id (instantiated once per process)."""
    if app not in _task_cache:
        tasks = importlib.import_module(APPS[app]).tasks()
        _task_cache[app] = {task.id: task for task in tasks}
    return _task_cache[app]


class WebAppEnv(WebEnv):
    """Tasks on one self-hosted app (see the module docstring)."""

    kind = "web.app"

    def __init__(self, app: str = "shop", *, max_turns: int = 30, **kwargs: Any):
        if app not in APPS:
            raise ValueError(f"unknown app {app!r}; known: {sorted(APPS)}")
        super().__init__(max_turns=max_turns, **kwargs)
        self.app_name = app
        module = importlib.import_module(APPS[app])
        self.app: WebApp = module.App()
        self.app.start()

    @cached_property
    def tasks(self) -> dict[str, WebTask]:
        return app_tasks(self.app_name)

    def task_ids(self) -> list[str]:
        return list(self.tasks)

    def task(self, task_id: str | None = None) -> WebTask:
        return self.tasks[task_id or self.task_id]

    def _origins(self) -> list[str]:
        return [self.app.origin]

    def _aliases(self) -> dict[str, str]:
        return {self.app.origin: f"http://{self.app_name}.local"}

    def _prepare_task(self, task_id: str) -> None:
        self.app.reset()

    async def _open(self, session: BrowserSession, task_id: str) -> str:
        task = self.tasks[task_id]
        if task.user:
            await session.context.add_cookies([{"name": "user", "value": task.user, "url": self.app.origin}])
        await session.new_page(self.app.origin + task.start_path)
        return task.goal

    async def _judge(self, session: BrowserSession, answer: str | None) -> Verdict | None:
        if answer is None:
            return None
        task = self.tasks[self._episode.task_id]
        # Only the app's own pages count as "where the agent ended up" (not a blob: or error page).
        url = session.page.url if origin_of(session.page.url) == origin_of(self.app.origin) else ""
        success = bool(task.evaluator(EvalContext(answer=answer, url=url, db=self.app.db)))
        return Verdict(float(success), success, True, {"evaluator": task.evaluator.describe()})

    def _capture_site(self) -> Any:
        return self.app.capture()

    def _load_site(self, payload: Any) -> None:
        self.app.load(payload)

    def _teardown(self) -> None:
        super()._teardown()
        self.app.close()
