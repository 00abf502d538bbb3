"""WebAppEnv: tasks on a self-hosted multi-page app (shop, webmail, wiki) — server state in SQLite, judged on the agent's answer, the URL and the database.

``gymnasium.make("agentgym/web.shop-v0")`` starts the app on a loopback port of its own; every
reset restores the seeded database, logs the task's user in and opens the start page. The
episode ends when the agent calls ``answer(text)`` (an empty answer for tasks that ask no
question); the task's evaluator then decides success (reward 1) or failure (reward 0), and
``info["grade"]`` says what it checked (``{"evaluator": ...}``). ``tasks=`` selects tasks of the
app (ids, or a pattern such as ``"cheapest_*"``). Snapshots carry a copy of the database, so forks
branch the server as well as the browser.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from agentgym.core import Verdict, select_tasks
from agentgym.env_lists import WEB_APPS
from agentgym.envs.web.env import WebEnv
from agentgym.envs.web.site import WebApp
from agentgym.envs.web.tasks import EvalContext, WebTask
from agentgym.sandbox.browser import origin_of
from agentgym.task import Task

__all__ = ["WebAppEnv", "app_tasks"]


def _app_module(app: str):
    """The app's package (one of :data:`~agentgym.env_lists.WEB_APPS`): it exposes ``App`` and ``tasks()``."""
    return importlib.import_module(f"agentgym.envs.web.apps.{app}")


_task_cache: dict[str, dict[str, WebTask]] = {}


def app_tasks(app: str) -> dict[str, WebTask]:
    """The tasks of an app by id (instantiated once per process)."""
    if app not in _task_cache:
        tasks = _app_module(app).tasks()
        _task_cache[app] = {task.id: task for task in tasks}
    return _task_cache[app]


class WebAppEnv(WebEnv):
    """Tasks on one self-hosted app (see the module docstring)."""

    kind = "web.app"

    def __init__(
        self, app: str = "shop", *, tasks: str | Sequence[str] | None = None, max_turns: int = 30, **kwargs: Any
    ):
        if app not in WEB_APPS:
            raise ValueError(f"unknown app {app!r}; known: {sorted(WEB_APPS)}")
        self._task_ids = select_tasks(app_tasks(app), tasks)
        super().__init__(max_turns=max_turns, **kwargs)
        self.app_name = app
        self.app: WebApp = _app_module(app).App()
        self.app.start()

    @cached_property
    def web_tasks(self) -> dict[str, WebTask]:
        """The app's task definitions by id (evaluator, start page, user, reference solution)."""
        return app_tasks(self.app_name)

    def task_ids(self) -> list[str]:
        return self._task_ids

    def tasks(self) -> list[Task]:
        """The selected tasks, reported per template, each with its scripted reference solution."""
        return [
            Task(
                task.id,
                task.goal,
                task.template,
                {"app": self.app_name, "start_path": task.start_path, "user": task.user, **task.params},
                task.solution,
            )
            for task in map(self.web_tasks.__getitem__, self._task_ids)
        ]

    def task(self, task_id: str | None = None) -> WebTask:
        return self.web_tasks[task_id or self.task_id]

    def _origins(self) -> list[str]:
        return [self.app.origin]

    def _aliases(self) -> dict[str, str]:
        return {self.app.origin: f"http://{self.app_name}.local"}

    async def _setup(self, task_id: str) -> str:
        self.app.reset()
        task = self.web_tasks[task_id]
        if task.user:
            await self.session.context.add_cookies([{"name": "user", "value": task.user, "url": self.app.origin}])
        await self.session.new_page(self.app.origin + task.start_path)
        return task.goal

    async def _grade(self, answer: str | None) -> Verdict | None:
        if answer is None:
            return None
        task = self.web_tasks[self._episode.task_id]
        # Only the app's own pages count as "where the agent ended up" (not a blob: or error page).
        page = self.session.page
        url = page.url if origin_of(page.url) == origin_of(self.app.origin) else ""
        success = bool(task.evaluator(EvalContext(answer=answer, url=url, db=self.app.db)))
        return Verdict(float(success), success, details={"evaluator": task.evaluator.describe()})

    def _branch_state(self) -> Any:
        return self.app.capture()

    def _load_branch_state(self, state: Any) -> None:
        self.app.load(state)

    def _teardown(self) -> None:
        self.app.close()
