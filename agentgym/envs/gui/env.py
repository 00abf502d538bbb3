"""DesktopEnv: desktop-app tasks (xedit, a spreadsheet, a file manager) on an Xvfb desktop in Docker, with screenshots and branching.

Each episode gets its own :class:`~agentgym.sandbox.desktop.DesktopSandbox` (a warm-pool
container, a fresh X server): the task's files are laid under ``/home/agent``, its app is
started, and the model sees the screenshot plus a text description (windows, focus, pointer,
the app's accessibility summary). Actions are the pyautogui-like tools of
:mod:`agentgym.envs.gui.actions`; ``done()`` runs the task's checker on the saved files,
``fail()`` gives up (the right answer for the infeasible tasks); either way the final step's
``info["grade"]`` is ``{"claim": "done" | "fail", "problem": <what the checker found, or None>}``.

Options as in the other families: ``tasks=`` (ids or a pattern), ``screen_size=(width, height)``,
``screenshot`` (default True; False leaves ``"image"`` out of the observations) and
``render_mode`` (``"rgb_array"``: ``render()`` is the last settled screenshot, as
:class:`agentgym.wrappers.RecordScreenshots` records it). The author's hooks
(:class:`agentgym.core.AgentEnv`) are ``_setup`` (a fresh desktop with the task's files and app),
``_grade(answer)`` (the task's checker on the claim ``"done"`` or ``"fail"``) and
``branch_attributes`` (or ``_branch_state`` / ``_load_branch_state``).

Branching. ``docker commit`` captures the filesystem — the files the apps saved and the Tk
apps' state files, which they rewrite after every event — but not the X server's memory (window
contents, an editor's unsaved buffer, the pointer). So a snapshot holds, besides the episode
bookkeeping, the action prefix since reset and the pointer position, and a fork rebuilds the
desktop one of two ways:

* **relaunch** (apps that restore their state: Sheet, Files): a container from the commit,
  a new X server with the pointer where it was, and the app relaunched, reading its state file
  (cell texts, cursors, selections, scroll, focus) — constant time in the episode's length;
* **replay** (apps that cannot: xedit, whose buffer lives only in its memory): a fresh desktop
  for the task with the action prefix replayed — exact, and linear in the prefix.

``fork_mode="replay"`` forces replay for every app. Either way, the fork's screenshot after the
next action equals that of an env that replayed the same actions, pixel for pixel: Xvfb
screenshots do not contain the pointer sprite (its position is in the text), nothing on the
desktop shows a clock, and the apps' cursors do not blink. Not captured: X selections and the
clipboard, key or button state held down between turns (actions release everything they
press), and anything an app keeps only in memory beyond what its state file lists.

``export_snapshot`` carries all of it as bytes: a relaunch snapshot's commit travels as its own
layers (:class:`~agentgym.sandbox.portable.PortableSnapshot`; the importing engine needs the
desktop image), a replay snapshot is only its action prefix and pointer.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, cast, final

from agentgym.actions import ToolCall, ToolSpec
from agentgym.core import AgentEnv, Outcome, Verdict, select_tasks
from agentgym.extras import requires
from agentgym.snapshot import SnapshotError

# The desktop modules need the Docker SDK; imported in here, a missing one names the gui extra.
with requires("gui"):
    from agentgym.envs.gui import tasks as task_catalog
    from agentgym.envs.gui.actions import TOOLS, format_action, to_desktop_action
    from agentgym.envs.gui.observation import describe
    from agentgym.envs.gui.tasks import APPS_DIR, HOME, DesktopTask
    from agentgym.sandbox.base import SandboxError
    from agentgym.sandbox.containers import containers_that_fit
    from agentgym.sandbox.desktop import DesktopSandbox, DesktopState, Screen, desktop_config, tar_tree
    from agentgym.sandbox.docker import DockerSnapshot, SandboxConfig
    from agentgym.sandbox.portable import PortableSnapshot

from agentgym.task import Task

__all__ = ["DesktopAppsEnv", "DesktopEnv", "DesktopPayload", "FORK_MODES", "apps_catalog"]

FORK_MODES = ("auto", "replay")
_APPS = Path(__file__).with_name("apps")
_TREE_SCRIPT = """import json, os, sys
root, out = sys.argv[1], {}
for folder, dirs, files in os.walk(root):
    for name in dirs:
        out[os.path.relpath(os.path.join(folder, name), root)] = None
    for name in files:
        with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as handle:
            out[os.path.relpath(os.path.join(folder, name), root)] = handle.read()
print(json.dumps(out))
"""
# A folder's listing for the ``vm_tree`` getter: lstat only (a symlink is reported, never followed), each
# regular file hashed through an O_NOFOLLOW descriptor checked to be the file that was listed; at most
# LISTING_ENTRIES entries and LISTING_BYTES bytes hashed, or it exits non-zero. "null" when root is no folder.
LISTING_ENTRIES = 5000
LISTING_BYTES = 256 << 20
_LISTING_SCRIPT = """import hashlib, json, os, stat, sys
root, entries, budget = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
try:
    top = os.lstat(root)
except FileNotFoundError:
    top = None
if top is None or not stat.S_ISDIR(top.st_mode):
    print("null"); sys.exit()
out, stack = {}, [""]
while stack:
    folder = stack.pop()
    with os.scandir(os.path.join(root, folder)) as listing:
        names = sorted(entry.name for entry in listing)
    for name in names:
        path = os.path.join(folder, name)
        info = os.lstat(os.path.join(root, path))
        kinds = ((stat.S_ISDIR, "dir"), (stat.S_ISREG, "file"), (stat.S_ISLNK, "symlink"))
        kind = next((label for test, label in kinds if test(info.st_mode)), "other")
        record = {"type": kind, "mode": stat.S_IMODE(info.st_mode), "size": info.st_size}
        if kind == "dir":
            stack.append(path)
        elif kind == "file":
            fd = os.open(os.path.join(root, path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as handle:
                again = os.fstat(handle.fileno())
                if (again.st_dev, again.st_ino) != (info.st_dev, info.st_ino):
                    sys.exit(path + " changed while it was listed")
                digest = hashlib.sha256()
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
                    budget -= len(chunk)
                    if budget < 0:
                        sys.exit("over the listing's byte limit")
            record["sha256"] = digest.hexdigest()
        out[path] = record
        if len(out) > entries:
            sys.exit("over the listing's entry limit")
print(json.dumps(out))
"""


@dataclass(frozen=True)
class DesktopPayload:
    """A desktop env's part of a snapshot: the commit (relaunch forks only), the action prefix, the pointer and the branch state."""

    task_id: str
    actions: tuple[dict, ...]
    pointer: tuple[int, int]
    sandbox_snapshot: DockerSnapshot | None  # a PortableSnapshot while it travels (export_snapshot)
    branch_state: Any = None


class SandboxFiles:
    """The :class:`~agentgym.envs.gui.tasks.Inspector` that checkers read the desktop's files through.

    Anything the agent made unreadable (a file it may not read, one over the read-back limit, a fifo that
    blocks the listing) raises OSError, which the grade counts as a failed check."""

    def __init__(self, desktop: DesktopSandbox):
        self.sandbox = desktop.sandbox

    def read(self, path: str) -> str | None:
        data = self.read_bytes(path)
        return None if data is None else data.decode("utf-8", errors="replace")

    def read_bytes(self, path: str) -> bytes | None:
        try:
            return self.sandbox.read_file(path)
        except (FileNotFoundError, IsADirectoryError):
            return None

    def tree(self, root: str) -> dict[str, str | None]:
        return self._run_script(_TREE_SCRIPT, root, timeout=30)

    def listing(self, root: str) -> dict[str, dict] | None:
        """Every entry below ``root`` with its type, mode, size and (files) SHA-256, read as the agent's user
        without following symlinks; None when ``root`` is not a folder (see ``_LISTING_SCRIPT``)."""
        return self._run_script(
            _LISTING_SCRIPT,
            root,
            str(LISTING_ENTRIES),
            str(LISTING_BYTES),
            timeout=60,
            max_bytes=LISTING_ENTRIES * 512,
        )

    def _run_script(self, script: str, root: str, *args: str, timeout: float, max_bytes: int | None = None) -> Any:
        """A reading script's JSON answer about ``root``, run as the agent's user; OSError when it fails."""
        # Isolated (-I: no cwd, PYTHON* variables or user site on sys.path) and from /, which the agent cannot
        # write: a module the agent leaves in its home must not stand in for the json or os the script imports.
        argv = ["/usr/bin/env", "-C", "/", "/usr/bin/python3", "-I", "-S", "-c", script, root, *args]
        code, stdout, stderr = self.sandbox.run_argv(argv, timeout=timeout, max_bytes=max_bytes)
        if code != 0:
            raise OSError(f"{root} could not be listed: {stderr.decode(errors='replace').strip()[-300:] or code}")
        return json.loads(stdout)


class DesktopEnv(AgentEnv):
    """Desktop-app tasks in a Docker desktop (see the module docstring)."""

    kind = "agentgym.gui.desktop"
    metadata: dict[str, Any] = {"render_modes": ["ansi", "rgb_array"]}
    #: The real apps' env (:class:`DesktopAppsEnv`) runs on the desktop-apps image and observes the AT-SPI tree.
    real_apps = False
    a11y_tree = False

    @staticmethod
    def catalog() -> Mapping[str, DesktopTask]:
        """The tasks this env offers, by id."""
        return task_catalog.TASKS

    def __init__(
        self,
        *,
        tasks: str | Sequence[str] | None = None,
        screen_size: tuple[int, int] = (1024, 768),
        screenshot: bool = True,
        image: str | None = None,
        sandbox_config: SandboxConfig | None = None,
        warm_pool: bool = True,
        fork_mode: str = "auto",
        max_turns: int = 30,
        render_mode: str | None = None,
    ):
        self.screen = Screen(*screen_size)
        if self.screen.width < 800 or self.screen.height < 600:
            raise ValueError(f"the apps need a screen of at least 800x600, got {screen_size}")
        if fork_mode not in FORK_MODES:
            raise ValueError(f"fork_mode must be one of {FORK_MODES}, got {fork_mode!r}")
        super().__init__(
            max_turns=max_turns,
            render_mode=render_mode,
            image_shape=(self.screen.height, self.screen.width) if screenshot else None,
        )
        try:
            self._task_ids = select_tasks(self.catalog(), tasks)
        except ValueError as exc:
            raise ValueError(f"{exc} (the tasks: {type(self).__name__}.catalog())") from None
        self.screenshot = screenshot
        self.image = image
        self.sandbox_config = sandbox_config or desktop_config()
        self.warm_pool = warm_pool
        self.fork_mode = fork_mode
        self.desktop: DesktopSandbox | None = None
        self._task: DesktopTask | None = None
        self._actions: list[dict] = []
        self._last: DesktopState | None = None

    # ------------------------------------------------------------------ AgentEnv and backend hooks
    def task_ids(self) -> Sequence[str]:
        return self._task_ids

    def tasks(self) -> list[Task]:
        """The selected desktop tasks, reported per app (``multi_apps``, as OSWorld's, for a task on several),
        each with its scripted reference solution."""
        return [
            Task(
                task.id,
                task.instruction,
                "multi_apps" if task.other_apps else task.app.name,
                {"feasible": task.feasible},
                task.solution,
            )
            for task in map(self.catalog().__getitem__, self._task_ids)
        ]

    def tools(self) -> list[ToolSpec]:
        return TOOLS

    def concurrency_bound(self) -> int | None:
        """As many desktops as the engine's machine holds with each using its whole CPU and memory limit (an app at
        work takes about one core: docs/results.md measures steps per second with 1, 2 and 3 desktops at once)."""
        return containers_that_fit(self.sandbox_config)

    @final
    def _backend_start(self, task_id: str) -> dict:
        goal = self._setup(task_id)
        observation: dict[str, Any] = {"text": describe(self._last, self.screen, headline=f"Task: {goal}")}
        if self.screenshot:
            observation["image"] = self._last.image
        return observation

    def _call_tool(self, call: ToolCall) -> Outcome:
        if call.name in ("done", "fail"):
            return self._finish(call.name)
        action, error = to_desktop_action(call, self.screen)
        if error:
            return Outcome(f"Error: {error}", error=error)
        state = self._live_desktop().act(action)
        self._actions.append(action)
        self._last = state
        return Outcome(
            describe(state, self.screen, headline=f"Did {format_action(action)}."),
            error=state.error,
            image=state.image if self.screenshot else None,
        )

    @final
    def _backend_capture(self) -> tuple[DesktopPayload, Callable[[], None] | None]:
        desktop, task = self._live_desktop(), self._task
        relaunch = self.fork_mode == "auto" and all(app.restores_state for app in (*task.other_apps, task.app))
        sandbox_snapshot = desktop.snapshot() if relaunch else None
        payload = DesktopPayload(
            task.id, tuple(self._actions), self._last.pointer, sandbox_snapshot, self._branch_state()
        )
        return payload, (sandbox_snapshot.release if sandbox_snapshot else None)

    @final
    def _backend_load(self, payload: DesktopPayload) -> None:
        self._close_desktop()
        task = self.catalog()[payload.task_id]
        if payload.sandbox_snapshot is not None:
            desktop = DesktopSandbox.from_snapshot(
                payload.sandbox_snapshot,
                screen=self.screen,
                config=self.sandbox_config,
                pointer=payload.pointer,
                a11y_tree=self.real_apps,
            )
            desktop.a11y_tree = self.a11y_tree
            try:
                state = _launch_apps(desktop, task)
            except BaseException:
                desktop.close(wait=False)
                raise
        else:
            desktop, state = self._start(task)
            try:
                for action in payload.actions:
                    state = desktop.act(action)
            except BaseException:
                desktop.close(wait=False)
                raise
        self.desktop, self._last, self._task, self._actions = desktop, state, task, list(payload.actions)
        self._load_branch_state(payload.branch_state)

    @final
    def _backend_export(self, payload: DesktopPayload) -> DesktopPayload:
        if payload.sandbox_snapshot is None:
            return payload
        portable = PortableSnapshot.of(payload.sandbox_snapshot)
        return dataclasses.replace(payload, sandbox_snapshot=cast(DockerSnapshot, portable))

    @final
    def _backend_import(self, exported: Any) -> tuple[DesktopPayload, Callable[[], None] | None]:
        if not isinstance(exported, DesktopPayload):
            raise SnapshotError(f"snapshot data of a {self.kind} holds no desktop state")
        if exported.sandbox_snapshot is None:  # a replay snapshot: the action prefix is all there is
            return exported, None
        sandbox_snapshot = cast(PortableSnapshot, exported.sandbox_snapshot).load()
        return dataclasses.replace(exported, sandbox_snapshot=sandbox_snapshot), sandbox_snapshot.release

    @final
    def _backend_metadata(self, payload: DesktopPayload) -> dict:
        mode = "relaunch" if payload.sandbox_snapshot else "replay"
        return {
            "fork": mode,
            "actions": len(payload.actions),
            **({"image": payload.sandbox_snapshot.ref} if payload.sandbox_snapshot else {}),
        }

    @final
    def _backend_close(self) -> None:
        self._close_desktop()

    def render(self) -> Any:
        if self.render_mode == "rgb_array":
            return None if self._last is None else self._last.image.copy()
        return super().render()

    # ------------------------------------------------------------------ the author's hooks
    def _setup(self, task_id: str) -> str:
        """A fresh desktop with the task's files laid out and its app on the screen; returns the instruction."""
        self._close_desktop()
        task = self.catalog()[task_id]
        self.desktop, self._last = self._start(task)
        self._task, self._actions = task, []
        return task.instruction

    def _grade(self, answer: str | None) -> Verdict:
        """The verdict on the agent's claim, ``answer`` (``"done"`` or ``"fail"``): the task's checker on the saved files."""
        claim, task, desktop = answer, self._task, self._live_desktop()
        for step in task.postconfig:  # e.g. close Chromium, which then writes what it held in memory
            self._setup_step(desktop, step)
        try:
            problem = task.check(SandboxFiles(desktop))
        except OSError as exc:  # the agent left its files unreadable: no evidence that the task was done
            problem = f"the files could not be checked ({exc})"
        if claim == "done":
            success = task.feasible and problem is None
            why = problem or ("" if task.feasible else "this task cannot be done; fail() was the right answer")
        else:
            success = not task.feasible and problem is None
            why = problem or ("" if not task.feasible else "the task could be done")
        return Verdict(
            1.0 if success else 0.0,
            success,
            details={"claim": claim, "problem": problem},
            message="Task complete." if success else f"Task not complete: {why}.",
        )

    # ------------------------------------------------------------------ helpers
    def _start(self, task: DesktopTask) -> tuple[DesktopSandbox, DesktopState]:
        """A fresh desktop with the task's files laid out and its app on the screen."""
        desktop = DesktopSandbox.create(
            self.image, screen=self.screen, config=self.sandbox_config, warm=self.warm_pool, a11y_tree=self.real_apps
        )
        desktop.a11y_tree = self.a11y_tree
        try:
            desktop.sandbox.put_tree(APPS_DIR, _apps_archive(self.sandbox_config))
            files = {
                path: content.encode() if isinstance(content, str) else content for path, content in task.files.items()
            }
            desktop.sandbox.put_tree(HOME, tar_tree(files, self.sandbox_config))
            state = _launch_apps(desktop, task)
            for step in task.setup:
                state = self._setup_step(desktop, step) or state
        except BaseException:
            desktop.close(wait=False)
            raise
        return desktop, state

    def _setup_step(self, desktop: DesktopSandbox, step: dict) -> DesktopState | None:
        """One of an OSWorld-format task's steps after its app is up (see :mod:`agentgym.envs.gui.osworld`)."""
        if step["type"] == "sleep":
            return desktop.act({"action": "wait", "seconds": float(step["seconds"])})
        command = step["command"] if step["type"] == "execute" else ["wmctrl", "-a", step["window_name"]]
        argv = shlex.split(command) if isinstance(command, str) else list(command)
        code, _, stderr = desktop.sandbox.run_argv(argv, timeout=60)
        if code != 0:
            raise SandboxError(f"task set-up step {step!r} failed ({code}): {stderr.decode(errors='replace')[-300:]}")
        return desktop.observe()

    def _live_desktop(self) -> DesktopSandbox:
        if self.desktop is None:
            raise RuntimeError("no desktop: call reset() first")
        return self.desktop

    def _close_desktop(self) -> None:
        if self.desktop is not None:
            self.desktop.close(wait=False)  # the container goes away in the background
            self.desktop = None


def _launch_apps(desktop: DesktopSandbox, task: DesktopTask) -> DesktopState:
    """Start the task's apps in order (``other_apps``, then ``app``, which keeps the focus)."""
    for app in (*task.other_apps, task.app):
        state = desktop.launch(app.name, list(app.argv), ready_title=app.ready_title)
    return state


@lru_cache(maxsize=4)
def _apps_archive(config: SandboxConfig) -> bytes:
    return tar_tree({path.name: path.read_bytes() for path in sorted(_APPS.glob("*.py"))}, config)


class DesktopAppsEnv(DesktopEnv):
    """OSWorld-format tasks on real apps (LibreOffice Calc, Writer and Impress, mousepad, GIMP, xterm, Chromium) on the
    desktop-apps image, observed through the screenshot and the AT-SPI accessibility tree (see
    :mod:`agentgym.envs.gui.osworld` and :mod:`agentgym.envs.gui.generators`). Forks replay the action prefix: what
    the apps hold in memory (an unsaved edit, the cursor, undo history, Chromium's tabs and what it has not yet
    written to its profile) is not in a container commit."""

    kind = "agentgym.gui.desktop-apps"
    real_apps = True

    def __init__(self, *, a11y_tree: bool = True, **options: Any):
        """``a11y_tree=False`` leaves the accessibility tree out of the observations (it costs about a second a
        step on a loaded 2-core machine); the other options are :class:`DesktopEnv`'s.

        The walk is also what lets a step wait for LibreOffice: its AT-SPI calls are answered on the app's
        main loop, after the input queued before them. Without it a step ends once the screen is still, and
        keys sent right after a reset were seen handled out of order by Writer (the reference solutions
        are verified with the tree on)."""
        super().__init__(**options)
        self.a11y_tree = a11y_tree

    @staticmethod
    def catalog() -> Mapping[str, DesktopTask]:
        return apps_catalog()


@lru_cache(maxsize=1)
def apps_catalog() -> dict[str, DesktopTask]:
    """The generated real-app tasks (:func:`agentgym.envs.gui.generators.generated_tasks`), loaded as OSWorld tasks."""
    from agentgym.envs.gui.generators import generated_tasks
    from agentgym.envs.gui.osworld import load_task

    tasks = [load_task(spec, files) for spec, files in generated_tasks()]
    return {task.id: task for task in tasks}
