"""The environment contract: AgentEnv, a Gymnasium env for LLM agents that can be snapshotted and forked mid-episode.

An :class:`AgentEnv` is a :class:`gymnasium.Env` whose actions are model text and whose
observations are ``{"text": str}`` (plus ``"image"``, an H×W×3 uint8 screenshot, for envs with
a screen). What sets it apart is branching:

* :meth:`AgentEnv.snapshot` captures the whole state at a turn boundary as a
  :class:`Snapshot` — an opaque, reference-counted handle;
* :meth:`AgentEnv.restore` puts this env back into a snapshot's state;
* :meth:`AgentEnv.fork` returns an *independent* env at that state while the original goes on;
* :meth:`AgentEnv.export_snapshot` turns a snapshot into bytes and :meth:`AgentEnv.import_snapshot`
  turns them back into a snapshot of another env of the same kind (another process or node), so
  that a fork can move to where there is room.

A forked continuation is indistinguishable from an env that reached the same state by
replaying the same actions from :meth:`reset`; each env kind has a test for this equality.

Bad model output is normal input. :meth:`step` never raises for what the model wrote: a
malformed or unknown tool call yields ``info["error"]`` and an observation that says what was
wrong and what is allowed. A failure of the environment itself (a dead sandbox) ends the
episode as truncated with ``info["env_error"]`` set, so a trainer can drop the sample. A limit
the agent used up (:class:`ResourceLimitExceeded`: a full disk, a process table that a fork
bomb keeps full) is the agent's failure instead: the episode terminates with reward 0 and
``info["limit_exceeded"]``, since a dropped or retried sample would let a policy that is about to
fail escape its 0 by exhausting the sandbox.

``info`` always carries ``task_id``, ``turn``, ``success``, ``error`` and ``tools`` (the
available tools in OpenAI function-calling JSON schema). ``tools`` is a new list each step, but
its schema dicts are built once per tool set and shared by every step that offers the same tools
(building them was most of a fast env's step): treat them as read-only.

Writing an env: subclass :class:`AgentEnv` or a family base class and implement the author's hooks;
the class docstring of :class:`AgentEnv` lists them, and, apart, the backend hooks for people
writing a new kind of sandbox.

Constructor options mean the same in every family: ``tasks=`` selects the tasks (ids, or a glob
pattern: :func:`select_tasks`), ``max_turns`` bounds the episode, and envs with a screen take
``screen_size=(width, height)`` and ``screenshot`` (whether observations carry ``"image"``).

A subclass's ``__init__`` need not know about Gymnasium's ``render_mode``: when its signature
has no ``render_mode`` (nor ``**kwargs``), the base class accepts the argument for it, checks it
against ``metadata["render_modes"]`` and sets it after the subclass's ``__init__`` ran. The
default ``metadata`` declares the ``ansi`` mode (the last observation's text) and a
``render_fps``, which a subclass's own ``metadata`` inherits unless it sets one.

Environments are used from one thread at a time; the async twins (``areset``, ``astep``,
``afork``, ``aclose``, ...) run the sync methods in a worker thread unless a subclass has a
native async implementation. Those threads come from one pool for all envs, sized by
``AGENTGYM_ENV_THREADS`` (default 64), not asyncio's default executor: env steps mostly wait on
containers and browsers, and the default pool (cores + 4 threads) would cap a runner's
concurrency at a handful of steps in flight.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import copy
import fnmatch
import functools
import inspect
import os
import string
import threading
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, Self, cast, final

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agentgym.actions import ParsedAction, ToolCall, ToolSpec, format_error, parse_action
from agentgym.snapshot import Snapshot, SnapshotMismatchError, decode_snapshot, encode_snapshot
from agentgym.task import Task

__all__ = [
    "AgentEnv",
    "AgentText",
    "AsyncTwins",
    "BranchAttributes",
    "Outcome",
    "Verdict",
    "select_tasks",
]

Observation = dict[str, Any]


class AgentText(spaces.Text):
    """A Text space for natural language: any Unicode string up to ``max_length`` characters.

    Gymnasium's :class:`~gymnasium.spaces.Text` only contains strings over its charset; model
    text and observations use all of Unicode, so membership checks only the length. Samples
    are drawn from printable ASCII (what ``check_env`` and random baselines need).
    """

    def __init__(self, max_length: int = 1 << 20, *, min_length: int = 0, seed: int | None = None):
        super().__init__(max_length, min_length=min_length, charset=string.printable, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length


class ResourceLimitExceeded(RuntimeError):
    """The agent used up a resource its env limits (disk, processes); the episode ends as its failure.

    Backends raise subclasses of this (e.g. the Docker sandbox's disk and process-table limits);
    :meth:`AgentEnv.step` turns one into a terminated step with reward 0 and
    ``info["limit_exceeded"]``, never an ``env_error`` (see the module docstring).
    """


@dataclass
class Outcome:
    """What one tool call (or one whole reply) did to the env.

    ``success`` is the task verdict when the reply ended the task (``None`` otherwise);
    ``info`` is merged into the step's info dict.
    """

    text: str
    reward: float = 0.0
    terminated: bool = False
    success: bool | None = None
    error: str | None = None
    image: np.ndarray | None = None
    info: dict = field(default_factory=dict)


@dataclass
class Verdict:
    """A grader's decision (what every ``_grade`` hook returns; see AgentEnv's docstring).

    ``details`` (JSON-serialisable: what was checked, what failed) become ``info["grade"]`` on
    the graded step; ``message``, if any, is what the agent is told about the verdict.
    """

    reward: float
    success: bool
    done: bool = True
    details: dict = field(default_factory=dict)
    message: str = ""

    def outcome(self, text: str, *, error: str | None = None) -> Outcome:
        """The step that delivers this verdict, with ``text`` as its observation."""
        return Outcome(
            text,
            reward=float(self.reward),
            terminated=self.done,
            success=bool(self.success),
            error=error,
            info={"grade": dict(self.details)},
        )


def select_tasks(available: Collection[str], tasks: str | Sequence[str] | None) -> list[str]:
    """The ids a ``tasks=`` constructor option selects from ``available`` (the same option in every family).

    None selects every available task; a string is a glob pattern over them
    (:func:`fnmatch.fnmatchcase`, e.g. ``"HumanEval/1*"``; an exact id matches itself); a
    sequence lists ids, kept in its order. A pattern that matches nothing or an id that is not
    available raises :class:`ValueError`.
    """
    if tasks is None:
        return list(available)
    if isinstance(tasks, str):
        selected = [task_id for task_id in available if fnmatch.fnmatchcase(task_id, tasks)]
        if not selected:
            raise ValueError(f"no task matches {tasks!r}")
        return selected
    unknown = [task_id for task_id in tasks if task_id not in available]
    if unknown:
        raise ValueError(f"unknown task id(s): {unknown[:5]}")
    return list(tasks)


class BranchAttributes:
    """The branch-state hooks of envs and wrappers: the state named in :attr:`branch_attributes`, deep-copied.

    Shared by :class:`AgentEnv` and :class:`agentgym.wrappers.BranchingWrapper`, whose
    snapshots and forks carry ``_branch_state()`` and put it back with ``_load_branch_state``;
    a subclass whose state is not a set of attributes overrides both.
    """

    #: The attributes that hold per-episode state a snapshot and a fork must carry.
    branch_attributes: ClassVar[tuple[str, ...]] = ()

    def _branch_state(self) -> Any:
        """The branch state, as a copy that later steps will not change."""
        return {name: copy.deepcopy(getattr(self, name)) for name in self.branch_attributes}

    def _load_branch_state(self, state: Any) -> None:
        """Take on ``state`` (made by :meth:`_branch_state`; leave it unchanged, a snapshot may be restored again)."""
        for name, value in state.items():
            setattr(self, name, copy.deepcopy(value))


@dataclass
class _EpisodeState:
    """The base class's part of a snapshot: the episode bookkeeping every env has."""

    task_id: str
    turn: int
    terminated: bool
    truncated: bool
    success: bool
    last_observation: Observation


class _Branchable(Protocol):
    """The sync surface that :class:`AsyncTwins` runs in the env thread pool (what a class using it provides)."""

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any: ...
    def step(self, action: Any) -> Any: ...
    def snapshot(self) -> Snapshot: ...
    def restore(self, snapshot: Snapshot) -> None: ...
    def fork(self, snapshot: Snapshot | None = None) -> Any: ...
    def close(self) -> None: ...


class AsyncTwins:
    """The async twins of ``reset``, ``step``, ``snapshot``, ``restore``, ``fork`` and ``close``: each runs the sync method in the shared env thread pool.

    Shared by :class:`AgentEnv` and wrappers that keep its surface (e.g. the memory wrapper).
    """

    async def areset(self: _Branchable, *, seed: int | None = None, options: dict | None = None):
        return await _in_env_thread(self.reset, seed=seed, options=options)

    async def astep(self: _Branchable, action: Any):
        return await _in_env_thread(self.step, action)

    async def asnapshot(self: _Branchable) -> Snapshot:
        return await _in_env_thread(self.snapshot)

    async def arestore(self: _Branchable, snapshot: Snapshot) -> None:
        await _in_env_thread(self.restore, snapshot)

    async def afork(self: _Branchable, snapshot: Snapshot | None = None):
        return await _in_env_thread(self.fork, snapshot)

    async def aclose(self: _Branchable) -> None:
        await _in_env_thread(self.close)


class AgentEnv(BranchAttributes, AsyncTwins, gym.Env[Observation, str], metaclass=abc.ABCMeta):
    """Base class of every agentgym environment (the contract is the module docstring).

    **Writing an env: the author's hooks.** One vocabulary, the same in :class:`AgentEnv` and in
    every family base class (``CodeEnv``, ``ToolEnv``, ``WebEnv``, ``DesktopEnv``): the same name
    and the same parameters for the same role. They are underscored because only the base class
    calls them (a caller who called ``env._setup`` would bypass the episode's bookkeeping); what
    callers use is public. The web family's ``_setup`` and ``_grade`` are coroutines (they run on
    the browser loop; the session is ``self.session``), with the same parameters.

    * :meth:`task_ids` — the tasks this env can run, and :meth:`tasks` when they have more to say
      than an id (a goal, a category, a reference solution: :class:`~agentgym.task.Task`);
    * :meth:`tools` — the :class:`~agentgym.actions.ToolSpec` list offered to the model;
    * ``_setup(task_id)`` — put the world at the task's start (a sandbox's files, an app's database
      and start page, a tool env's state) and return what the agent is told first (a family shows
      it as the goal beside its own observation);
    * ``_call_tool(call)`` — run one validated call and return an :class:`Outcome` (or override
      ``_act(parsed)`` for the whole reply); a call that ends the episode returns
      ``self._finish(answer, text)``, which asks ``_grade``;
    * ``_grade(answer)`` — decide the reward from positive evidence that the task was done and
      return a :class:`Verdict` (its ``details`` become ``info["grade"]`` on the graded step, the
      one place for a grader's details in every family). ``answer`` is what the agent ended the
      episode with: its final answer (empty when the ending tool takes none), or the desktop's claim
      (``"done"``/``"fail"``); None when it ended on no answer (the env ended it, or, in the web
      family, which grades after every turn, a turn that was no answer). Returning None gives no
      verdict: the web episode goes on, any other ends with reward 0;
    * ``branch_attributes`` — the names of the env fields that snapshots must carry beyond what the
      base captures itself (deep-copied), or, for state that is not a set of fields,
      ``_branch_state()`` / ``_load_branch_state(state)``. A bare ``AgentEnv``'s world *is* its
      fields, so list them all; a family captures its sandbox, browser, desktop or tool state;
    * ``_teardown()`` — free what the author's code holds; :meth:`close` calls it once, before the
      backend closes.

    Family implementations of these roles that must not be overridden are marked
    :func:`typing.final`; the hooks a family leaves open are abstract (``_setup`` and ``_grade`` in
    the code and web families, and the web's ``_origins``), and so is :meth:`task_ids` everywhere.
    :class:`AgentEnv`'s own ``_setup`` and ``_call_tool`` (needed unless ``_act`` is overridden)
    raise :class:`NotImplementedError` instead of being abstract, because a proxy that forwards the
    whole public face elsewhere (:class:`~agentgym.distributed.remote_env.RemoteEnv`) is an AgentEnv
    with no hooks at all; ``_grade`` defaults to no verdict, ``_teardown`` to nothing.

    **Backend hooks** are for people writing a new kind of sandbox (a family base class, or an
    integration that drives a remote env), not for env authors; every family implements them
    (final). Each is named ``_backend_*``:

    * ``_backend_start(task_id)`` — make the backend ready for a fresh episode, call ``_setup`` and
      return the first observation (default: what ``_setup`` returned);
    * ``_backend_capture()`` / ``_backend_load(payload)`` — the env's state in and out of
      snapshots; the capture returns ``(payload, release)`` (``release`` frees backing resources,
      e.g. a committed image, or is None). The payload includes ``_branch_state()`` and the load
      calls ``_load_branch_state`` (default: the branch state is the whole payload);
    * ``_backend_export(payload)`` / ``_backend_import(exported)`` — a picklable stand-in for a
      payload that names something local (a committed image travels as its layers), and its undoing
      on the importing side, which returns ``(payload, release)``; for :meth:`export_snapshot` and
      :meth:`import_snapshot` (default: the payload itself, for plain data);
    * ``_backend_metadata(payload)`` — serialisable details for :attr:`Snapshot.metadata`;
    * ``_backend_close()`` — free the backend's resources (containers, processes, browsers).
    """

    # Turn-based: a frame per turn; render_fps only paces a viewer (Gymnasium warns when it is missing).
    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 1}
    #: A stable name for the kind of env; snapshots restore only into envs of the same kind.
    kind: str = ""
    #: Fenced-code language → (tool, argument), e.g. {"python": ("python", "code")}.
    code_block_tools: ClassVar[dict[str, tuple[str, str]]] = {}
    #: Whether a reply without any tool call is acceptable (otherwise it is an error).
    allow_text_replies: bool = False
    _spawn_args: tuple[tuple, dict]

    @property
    def unwrapped(self) -> AgentEnv:
        """The env itself, as Gymnasium's ``unwrapped`` is for a base env; typed as an AgentEnv for its callers."""
        return self

    def __new__(cls, *args, **kwargs):
        # Remember the constructor arguments so that fork() can build a sibling env with the
        # same configuration, without every subclass having to implement cloning.
        self = super().__new__(cls)
        self._spawn_args = (args, dict(kwargs))
        return self

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if not cls.__dict__.get("kind"):
            cls.kind = f"{cls.__module__}.{cls.__qualname__}"
        if "metadata" in cls.__dict__ and "render_fps" not in cls.metadata:
            cls.metadata = {**cls.metadata, "render_fps": AgentEnv.metadata["render_fps"]}
        init = cls.__dict__.get("__init__")
        if init is not None and not _takes_render_mode(init):
            cls.__init__ = _with_render_mode(init)  # type: ignore[method-assign]  # wrapping the subclass's own __init__

    def __init__(
        self,
        *,
        max_turns: int = 30,
        render_mode: str | None = None,
        image_shape: tuple[int, int] | None = None,
        max_text_length: int = 1 << 20,
    ):
        self.max_turns = max_turns
        self.render_mode = self._checked_render_mode(render_mode)
        obs_spaces: dict[str, spaces.Space] = {"text": AgentText(max_text_length)}
        if image_shape is not None:
            height, width = image_shape
            obs_spaces["image"] = spaces.Box(0, 255, (height, width, 3), np.uint8)
        self.observation_space = spaces.Dict(obs_spaces)
        self.action_space = AgentText(max_text_length)
        self._episode: _EpisodeState | None = None
        self._task_set: frozenset[str] | None = None
        # info["tools"]: the specs of the last tools() and their OpenAI schemas, rebuilt when tools() changes.
        self._tool_schemas: tuple[list[ToolSpec], list[dict]] = ([], [])
        self._closed = False

    # ------------------------------------------------------------------ the author's hooks
    @abc.abstractmethod
    def task_ids(self) -> Sequence[str]:
        """The ids of the tasks this env can run (``reset(options={"task_id": ...})``)."""

    def tasks(self) -> Sequence[Task]:
        """The tasks this env can run, in :meth:`task_ids` order, as :class:`~agentgym.task.Task` objects.

        The default knows only the ids (an empty goal, no category, no reference solution);
        the built-in envs override it so that each task carries its goal, its category and,
        where one exists, its reference solution.
        """
        return [Task(task_id) for task_id in self.task_ids()]

    def tools(self) -> list[ToolSpec]:
        """The tools offered to the model in the current state."""
        return []

    def concurrency_bound(self) -> int | None:
        """The most envs like this one worth running at once on this machine (None: no bound of the env's own).

        :class:`~agentgym.rollout.runner.Runner` (and so ``agentgym eval`` and the trainers) runs no more episodes at
        once than the first env it makes allows. The desktops bound it by the cores and memory each may use."""
        return None

    # The return types admit awaitables because the web family's _setup and _grade are coroutines of
    # the same name and parameters (its _backend_start and _act await them on its browser loop).
    def _setup(self, task_id: str) -> str | Observation | Awaitable[str | Observation]:
        """Put the world at ``task_id``'s start and return what the agent is told first (text or an observation dict)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _setup")

    def _call_tool(self, call: ToolCall) -> Outcome:
        """Run one validated tool call (needed unless :meth:`_act` is overridden)."""
        raise NotImplementedError(f"{type(self).__name__} implements neither _call_tool nor _act")

    def _grade(self, answer: str | None) -> Verdict | None | Awaitable[Verdict | None]:
        """The verdict on the episode the agent ended with ``answer`` (see the class docstring); default: none, reward 0."""
        return None

    def _teardown(self) -> None:
        """Free what the author's code holds; :meth:`close` calls it once, before :meth:`_backend_close`."""

    # ------------------------------------------------------------------ backend hooks (class docstring)
    def _backend_start(self, task_id: str) -> str | Observation:
        """Make the backend ready for a fresh episode on ``task_id``, set the task up and return the first observation."""
        return cast("str | Observation", self._setup(task_id))  # sync here: the web family overrides this hook

    def _backend_capture(self) -> tuple[Any, Callable[[], None] | None]:
        """The env's state for a snapshot: ``(payload, release)``; release frees backing resources (or is None)."""
        return self._branch_state(), None

    def _backend_load(self, payload: Any) -> None:
        """Put the env's state back from a payload made by :meth:`_backend_capture` (of any env of this kind)."""
        self._load_branch_state(payload)

    def _backend_export(self, payload: Any) -> Any:
        """A picklable stand-in for a :meth:`_backend_capture` payload that holds resources of this process or node.

        The default is the payload itself, for payloads that are plain data. A family whose payload
        names something local (a committed image) returns its bytes here; one that cannot export
        raises :class:`SnapshotError` saying why.
        """
        return payload

    def _backend_import(self, exported: Any) -> tuple[Any, Callable[[], None] | None]:
        """Undo :meth:`_backend_export` on the importing side: ``(payload, release)``, as :meth:`_backend_capture` returns.

        ``release`` frees what the import made (a loaded image); the default has nothing to free.
        """
        return exported, None

    def _backend_metadata(self, payload: Any) -> dict:
        """Serialisable backend details for :attr:`Snapshot.metadata` (e.g. an image id)."""
        return {}

    def _backend_close(self) -> None:
        """Free the backend's resources (containers, processes, browsers). Called once by :meth:`close`."""

    # ------------------------------------------------------------------ the Gymnasium face
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Observation, dict]:
        """Start an episode on ``options["task_id"]``, or on a task drawn with the env's seeded RNG."""
        super().reset(seed=seed)
        self._check_open()
        task_id = (options or {}).get("task_id")
        if task_id is None:
            ids = self.task_ids()
            task_id = ids[int(self.np_random.integers(len(ids)))]
        elif task_id not in self._known_tasks():
            raise ValueError(f"unknown task_id {task_id!r} for {self.kind}; see env.task_ids()")
        observation = self._as_observation(self._backend_start(task_id))
        self._episode = _EpisodeState(task_id, 0, False, False, False, observation)
        return observation, self._info()

    def step(self, action: Any) -> tuple[Observation, float, bool, bool, dict]:
        """Apply one model reply: parse its tool calls, run them in order, observe."""
        self._check_open()
        episode = self._episode
        if episode is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        if episode.terminated or episode.truncated:
            text = "Error: the episode is over; call reset() to start a new one."
            return (
                self._as_observation(text),
                0.0,
                episode.terminated,
                episode.truncated,
                self._info(error="episode is over"),
            )
        episode.turn += 1
        try:
            parsed = self.parse(action)
            outcome = self._act(parsed)
        except ResourceLimitExceeded as exc:  # the agent's doing: a failure to score, not a sample to drop
            outcome = Outcome(
                f"The episode is over: {exc}",
                reward=0.0,
                terminated=True,
                success=False,
                error=str(exc),
                info={"limit_exceeded": f"{type(exc).__name__}: {exc}"},
            )
        except Exception as exc:  # the env broke, not the model: end the episode, keep the process
            outcome = Outcome(
                f"Environment error: {type(exc).__name__}: {exc}",
                error=str(exc),
                info={"env_error": f"{type(exc).__name__}: {exc}"},
            )
            episode.truncated = True
        if outcome.success is not None:
            episode.success = bool(outcome.success)
        episode.terminated = episode.terminated or outcome.terminated
        episode.truncated = episode.truncated or (not episode.terminated and episode.turn >= self.max_turns)
        observation = self._as_observation(outcome.text, outcome.image)
        episode.last_observation = observation
        info = self._info(error=outcome.error)
        info.update(outcome.info)
        return observation, float(outcome.reward), episode.terminated, episode.truncated, info

    def _checked_render_mode(self, render_mode: str | None) -> str | None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        return render_mode

    def render(self) -> str | None:
        if self.render_mode == "ansi" and self._episode is not None:
            return self._episode.last_observation["text"]
        return None

    def close(self) -> None:
        """Free every resource; idempotent."""
        if not self._closed:
            self._closed = True
            try:
                self._teardown()
            finally:
                self._backend_close()
        super().close()

    # ------------------------------------------------------------------ replies and tools
    def parse(self, action: Any) -> ParsedAction:
        """Parse a reply with this env's tools; never raises (see :func:`agentgym.actions.parse_action`)."""
        return parse_action(
            action, self.tools(), code_block_tools=self.code_block_tools, allow_text=self.allow_text_replies
        )

    def _act(self, parsed: ParsedAction) -> Outcome:
        """Run the reply's calls in order; invalid calls report their error, valid ones run.

        Execution stops after a call that terminates the episode. A reply with no usable call
        costs the turn and explains the allowed format.
        """
        if not parsed.calls:
            if self.allow_text_replies:
                return self._reply_without_calls(parsed.text)
            return Outcome(format_error(parsed.error or "no tool call found", self.tools()), error=parsed.error)
        parts, errors, info, reward, terminated, success, image = [], [], {}, 0.0, False, None, None
        for call in parsed.calls:
            if call.ok:
                result = self._call_tool(call)
            else:
                result = Outcome(format_error(call.error, self.tools()), error=call.error)
            parts.append(result.text if len(parsed.calls) == 1 else f"[{call.name}] {result.text}")
            if result.error:
                errors.append(result.error)
            info.update(result.info)
            reward += result.reward
            image = result.image if result.image is not None else image
            if result.success is not None:
                success = result.success
            if result.terminated:
                terminated = True
                break
        return Outcome("\n\n".join(parts), reward, terminated, success, "; ".join(errors) or None, image, info)

    def _reply_without_calls(self, text: str) -> Outcome:
        """What a plain-text reply does in envs that allow them (``allow_text_replies``): it is the final answer."""
        return self._finish(text, "Answer received.")

    @final
    def _finish(self, answer: str | None, text: str = "", *, error: str | None = None) -> Outcome:
        """The step that ends the episode on ``answer`` with :meth:`_grade`'s verdict (none: reward 0, no success).

        Its observation is ``text`` followed by the verdict's message.
        """
        verdict = cast("Verdict | None", self._grade(answer)) or Verdict(0.0, False)  # sync: web ends episodes itself
        shown = "\n\n".join(part for part in (text, verdict.message) if part)
        return verdict.outcome(shown or "The episode is over.", error=error)

    # ------------------------------------------------------------------ branching
    def snapshot(self) -> Snapshot:
        """Capture the current state; the caller owns one reference (release it when done)."""
        self._check_open()
        episode = self._require_episode()
        payload, release = self._backend_capture()
        state = _EpisodeState(**vars(episode))
        return Snapshot(
            kind=self.kind,
            task_id=episode.task_id,
            turn=episode.turn,
            payload=(state, payload),
            release=release,
            metadata=self._backend_metadata(payload),
        )

    def restore(self, snapshot: Snapshot) -> None:
        """Put this env into ``snapshot``'s state (the snapshot stays valid and owned by the caller)."""
        self._check_open()
        state, payload = self._check_restorable(snapshot)
        self._backend_load(payload)
        self._episode = _EpisodeState(**vars(state))

    def fork(self, snapshot: Snapshot | None = None) -> Self:
        """A new, independent env at ``snapshot``'s state (default: the current state).

        The returned env is not wrapped (forking through wrappers gives the same stack of wrappers:
        :mod:`agentgym.wrappers`); it has the same configuration as this one and must be closed
        by the caller.
        """
        own = snapshot is None
        snapshot = self.snapshot() if own else snapshot
        try:
            self._check_restorable(snapshot)
            args, kwargs = self._spawn_args
            child = type(self)(*args, **kwargs)
            child.spec = self.spec  # the registered id gymnasium.make gave this env (fork() is no make)
            try:
                child.restore(snapshot)
            except BaseException:
                child.close()
                raise
        finally:
            if own:
                snapshot.release()
        return child

    def _check_restorable(self, snapshot: Snapshot) -> tuple[_EpisodeState, Any]:
        if snapshot.kind != self.kind:
            raise SnapshotMismatchError(f"snapshot of a {snapshot.kind} cannot restore into a {self.kind}")
        if self._episode is not None and self._episode.task_id != snapshot.task_id:
            raise SnapshotMismatchError(
                f"snapshot of task {snapshot.task_id!r} cannot restore into an env on task "
                f"{self._episode.task_id!r}; fork() it or reset to that task first"
            )
        return snapshot.payload

    def export_snapshot(self, snapshot: Snapshot) -> bytes:
        """``snapshot`` as bytes that :meth:`import_snapshot` of an env of the same kind turns back into a snapshot.

        The bytes start with a header (format version, env kind, task id, turn, body size and
        SHA-256) and carry the episode bookkeeping and the family's payload (:meth:`_backend_export`:
        a code env's committed image travels inside). The snapshot stays valid and owned by the caller;
        it keeps the bytes until its release, so exporting it again costs nothing.

        The body is a pickle: snapshot bytes are trusted data, made by an env of the same run and
        passed between its own processes (Ray's object store, a shared path), never input from
        outside the run. Raises :class:`SnapshotError` for a family that cannot export.
        """
        self._check_open()
        if snapshot.kind != self.kind:
            raise SnapshotMismatchError(f"snapshot of a {snapshot.kind} cannot be exported by a {self.kind}")
        state, payload = snapshot.payload
        return encode_snapshot(snapshot, lambda: (state, self._backend_export(payload)))

    def import_snapshot(self, data: bytes) -> Snapshot:
        """A snapshot of this env's kind from :meth:`export_snapshot`'s bytes (made here or on another node).

        The caller owns one reference; :meth:`fork` and :meth:`restore` take it like a snapshot of
        this env, and its last release frees what the import made (e.g. the loaded image). Raises
        :class:`SnapshotMismatchError` for another env kind and :class:`SnapshotError` for data that
        is not a whole snapshot of a format this version reads. The header and checksum are checked
        before anything is unpickled; the bytes must be trusted (see :meth:`export_snapshot`).
        """
        self._check_open()
        header, (state, exported) = decode_snapshot(data, self.kind)
        payload, release = self._backend_import(exported)
        return Snapshot(
            kind=self.kind,
            task_id=header["task_id"],
            turn=header["turn"],
            payload=(state, payload),
            release=release,
            metadata={**self._backend_metadata(payload), "imported": True},
        )

    @property
    def task_id(self) -> str | None:
        return self._episode.task_id if self._episode else None

    @property
    def turn(self) -> int:
        return self._episode.turn if self._episode else 0

    def _known_tasks(self) -> frozenset[str]:
        if self._task_set is None:
            self._task_set = frozenset(self.task_ids())
        return self._task_set

    def _require_episode(self) -> _EpisodeState:
        if self._episode is None:
            raise gym.error.ResetNeeded("call reset() first")
        return self._episode

    def _check_open(self) -> None:
        if self._closed:
            raise gym.error.ClosedEnvironmentError(f"{type(self).__name__} is closed")

    def _as_observation(self, value: str | Observation, image: np.ndarray | None = None) -> Observation:
        observation: Observation = dict(value) if isinstance(value, dict) else {"text": value}
        if image is not None:
            observation["image"] = image
        space = self.observation_space
        if isinstance(space, gym.spaces.Dict) and "image" in space.spaces and "image" not in observation:
            # Keep the last screenshot when a step did not take a new one (the space requires it); a copy,
            # since callers own what a step returns (Gymnasium's check_env tests that no two share data).
            previous = self._episode.last_observation.get("image") if self._episode else None
            observation["image"] = previous.copy() if previous is not None else np.zeros(space["image"].shape, np.uint8)
        return observation

    def _info(self, error: str | None = None) -> dict:
        episode = self._episode
        return {
            "task_id": episode.task_id if episode else None,
            "turn": episode.turn if episode else 0,
            "success": episode.success if episode else False,
            "error": error,
            "tools": self._openai_tools(),
        }

    def _openai_tools(self) -> list[dict]:
        """``info["tools"]``: the schemas of :meth:`tools`, rebuilt only when its specs changed (see the module docstring).

        Envs whose tools change mid-episode (BFCL's withheld functions, a code env's limits) need
        nothing special: the specs are compared every step, by identity where ``tools()`` returns
        the same objects and field by field where it builds equal ones anew.
        """
        tools = list(self.tools())
        specs, schemas = self._tool_schemas
        if tools != specs:
            schemas = [tool.to_openai() for tool in tools]
            self._tool_schemas = (tools, schemas)
        return list(schemas)

    def __del__(self):
        # Best effort only: envs own containers and processes, which close() frees promptly.
        try:
            if not getattr(self, "_closed", True):
                self.close()
        except Exception:
            pass


def _takes_render_mode(init: Callable) -> bool:
    parameters = inspect.signature(init).parameters.values()
    return any(p.name == "render_mode" or p.kind is p.VAR_KEYWORD for p in parameters)


def _with_render_mode(init: Callable) -> Callable:
    """``init`` that also accepts ``render_mode``: checked and set after ``init`` ran (see the module docstring)."""

    @functools.wraps(init)
    def __init__(self, *args, render_mode: str | None = None, **kwargs):
        init(self, *args, **kwargs)
        self.render_mode = self._checked_render_mode(render_mode)

    return __init__


_env_pool: concurrent.futures.ThreadPoolExecutor | None = None
_env_pool_lock = threading.Lock()


async def _in_env_thread(function: Callable, *args, **kwargs):
    """Run a blocking env method in the shared env thread pool (see the module docstring)."""
    global _env_pool
    if _env_pool is None:
        with _env_pool_lock:
            if _env_pool is None:
                _env_pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=int(os.environ.get("AGENTGYM_ENV_THREADS", "64")), thread_name_prefix="agentgym-env"
                )
    return await asyncio.get_running_loop().run_in_executor(_env_pool, functools.partial(function, *args, **kwargs))
