"""ToolEnv: an AgentEnv made from plain Python functions, a dict of tasks and a check — the quickest way to write a tool-use environment.

::

    def deposit(amount: int, state: dict) -> str:
        \"\"\"Put money in the account.\"\"\"
        state["balance"] += amount
        return f"balance: {state['balance']}"

    env = ToolEnv([deposit], {"save-50": {"prompt": "Deposit 50.", "goal": 50}},
                  state_factory=lambda task: {"balance": 0},
                  check=lambda task, state, transcript: (float(ok := state["balance"] == task["goal"]), ok))

How the pieces fit:

* **Tools** are callables, :class:`~agentgym.envs.tool.schema.Tool` objects, or an object whose
  public methods are tools; their schemas come from type hints and docstrings
  (:mod:`agentgym.envs.tool.schema`).
* **World state.** ``state_factory(task)`` builds a fresh state at every ``reset``: any
  deep-copyable Python object, a :class:`~agentgym.envs.state.SQLiteState`, or a Python
  object holding one. A tool gets it by declaring a parameter named ``state`` (hidden from the
  model). All episode state lives there, never in the tool functions or the tools object: fork
  rebuilds the env from the same constructor arguments and then copies only the state, so
  anything kept elsewhere would be shared between branches.
* **Ending.** The episode ends when the agent calls ``submit`` — a built-in
  ``submit(answer?)`` unless the author defines a tool of that name, which then runs first — or,
  with ``allow_text_replies`` (the default), when it replies with text and no tool call (that
  text is the answer). Then the ``_grade(answer)`` hook decides (``answer``: submit's
  ``answer`` argument, ``""`` without one, or the text): by default it calls
  ``check(task, state, transcript)``, which returns ``(reward, success)`` or a
  :class:`~agentgym.core.Verdict` (whose ``details`` become ``info["grade"]``); without a check
  the reward is 0 and success False. A subclass may override ``_grade`` instead of passing a
  check. The transcript is a list of ``{"tool", "arguments", "result"}`` dicts, one per executed
  call; a final text reply is recorded as ``submit`` with ``{"answer": text}``.
* **The author's hooks** (see :class:`agentgym.core.AgentEnv`): ``_setup(task_id)`` builds the state and
  returns the prompt; ``branch_attributes`` (or ``_branch_state()`` / ``_load_branch_state()``)
  name env fields beyond the state (better kept in the state itself).
* **Failures are results.** An exception in a tool becomes its result text
  (``Error: <Type>: <message>``). Each call runs in a worker thread and is cut off after
  ``call_timeout`` seconds (or the tool's own ``timeout``) with ``Error: tool timed out after
  Xs``; the episode goes on. Async tools are cancelled at the timeout; a sync tool gets an
  exception raised in its thread, which takes effect at its next Python bytecode — a tool
  blocked inside C code (a sleep, a socket read) finishes that call first.
* **Snapshots** copy the state and the transcript (:class:`~agentgym.envs.state.StateCopy`:
  pickled Python objects, SQLite via the backup API), so a fork continues exactly as a replay
  of the same actions would. ``export_snapshot`` carries that copy as bytes (databases
  serialised); a state that does not pickle (a lambda, a lock: the copy falls back to
  ``copy.deepcopy``) cannot leave its process, and exporting it raises
  :class:`~agentgym.snapshot.SnapshotError`.
"""

from __future__ import annotations

import asyncio
import copy
import ctypes
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, final

from agentgym.actions import ToolCall, ToolSpec
from agentgym.core import AgentEnv, Outcome, Verdict
from agentgym.envs.state import SQLiteState, StateCopy
from agentgym.envs.tool.schema import Tool, tool_from_callable, tools_from_object
from agentgym.snapshot import Snapshot, SnapshotError
from agentgym.task import Task

__all__ = ["ToolEnv", "SUBMIT"]

Check = Callable[[Any, Any, list], "tuple[float, bool] | Verdict"]

#: The built-in submit tool, offered when the author does not define one.
SUBMIT = ToolSpec(
    "submit",
    "Finish the task. Put your final answer in `answer` if the task asks for one.",
    {
        "type": "object",
        "properties": {"answer": {"type": "string", "description": "The final answer, if any."}},
        "required": [],
    },
)


class ToolEnv(AgentEnv):
    """An env whose tools are Python functions acting on a per-episode world state (see the module docstring).

    Args:
        tools: callables, :class:`Tool` objects and/or objects whose public methods are tools
            (a single object is accepted too).
        tasks: the tasks this env runs, task id → task (a ToolEnv's tasks are written by its author;
            the built-in envs take ids or a pattern here); a task is its prompt text, a mapping with
            a ``"prompt"`` key, or an object with a ``prompt`` attribute, plus whatever the check needs;
            a ``"category"`` and a ``"solution"`` (its reference solution: the replies that solve
            it, see :class:`agentgym.Task`), as keys or attributes, are what :meth:`tasks` reports.
            They stay available as :attr:`task_data`.
        state_factory: ``task → state``, called at every reset (default: the state is None).
        check: ``(task, state, transcript) → (reward, success)`` or a :class:`Verdict`, called by
            the default ``_grade`` when the episode ends.
        max_turns: replies before the episode is truncated.
        call_timeout: seconds one tool call may run (None: no limit).
        allow_text_replies: whether a reply without a tool call is the final answer (otherwise
            it is an error that costs the turn).
        variant: distinguishes this configuration in snapshot kinds, so that a snapshot of one
            ToolEnv cannot be restored into a differently configured one.
    """

    def __init__(
        self,
        tools: Any,
        tasks: Mapping[str, Any],
        *,
        state_factory: Callable[[Any], Any] | None = None,
        check: Check | None = None,
        max_turns: int = 20,
        call_timeout: float | None = 10.0,
        allow_text_replies: bool = True,
        variant: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(max_turns=max_turns, **kwargs)
        if not tasks:
            raise ValueError("ToolEnv needs at least one task")
        self.task_data = tasks
        self.state_factory = state_factory
        self.check = check
        self.call_timeout = call_timeout
        self.allow_text_replies = allow_text_replies
        if variant:
            self.kind = f"{type(self).kind}:{variant}"
        self._tools = {tool.name: tool for tool in _collect_tools(tools)}
        self._specs = [tool.spec for tool in self._tools.values()]
        if "submit" not in self._tools:
            self._specs.append(SUBMIT)
        self.state: Any = None
        self.transcript: list[dict] = []
        self._handing_off = False

    # ------------------------------------------------------------------ AgentEnv hooks
    def task_ids(self) -> list[str]:
        return list(self.task_data)

    def tasks(self) -> list[Task]:
        """Each task as an :class:`agentgym.Task`: its prompt, and its ``category`` and ``solution`` where it has them."""
        tasks = []
        for task_id in self.task_ids():
            task = self.task_data[task_id]
            tasks.append(
                Task(task_id, _prompt(task), str(_field(task, "category") or ""), solution=_field(task, "solution"))
            )
        return tasks

    def tools(self) -> list[ToolSpec]:
        return self._specs

    def _call_tool(self, call: ToolCall) -> Outcome:
        tool = self._tools.get(call.name)
        # Only the built-in submit has no Tool.
        text, failed = self._run(tool, call.arguments) if tool else ("Submitted.", False)
        self._record(call.name, call.arguments, text)
        if failed:
            return Outcome(text, error=text)
        if call.name == "submit":
            return self._finish(str(call.arguments.get("answer", "")), text)
        return Outcome(text)

    def _reply_without_calls(self, text: str) -> Outcome:
        self._record("submit", {"answer": text}, "")
        return super()._reply_without_calls(text)

    def fork(self, snapshot: Snapshot | None = None) -> ToolEnv:
        if snapshot is not None:
            return super().fork(snapshot)
        # The snapshot fork() takes itself is restored once and then released, so the child may
        # take that copy of the state instead of copying it again: one copy per fork, not two.
        self._handing_off = True
        try:
            return super().fork()
        finally:
            self._handing_off = False

    @final
    def _backend_capture(self) -> tuple[Any, None]:
        # One copy of all three keeps objects shared between state and transcript shared.
        frozen = StateCopy((self.state, self.transcript, self._branch_state()))
        return (_HandOff(frozen) if self._handing_off else frozen), None

    @final
    def _backend_load(self, payload: StateCopy | _HandOff) -> None:
        state, transcript, branch_state = payload.take() if isinstance(payload, _HandOff) else payload.restore()
        self._replace_state(state, transcript)
        self._load_branch_state(branch_state)

    @final
    def _backend_close(self) -> None:
        self._replace_state(None, [])

    # ------------------------------------------------------------------ the author's hooks
    def _setup(self, task_id: str) -> str:
        """A fresh state for the task (``state_factory``); returns the task's prompt."""
        task = self.task_data[task_id]
        self._replace_state(self.state_factory(task) if self.state_factory else None, [])
        return _prompt(task)

    def _grade(self, answer: str | None) -> Verdict:
        """The verdict when the episode ends: the ``check``'s, else reward 0 and no success."""
        if self.check is None:
            return Verdict(0.0, False)
        result = self.check(self.task_data[self.task_id], self.state, self.transcript)
        if isinstance(result, Verdict):
            return result
        reward, success = result
        return Verdict(float(reward), bool(success))

    # ------------------------------------------------------------------ running tools
    def _run(self, tool: Tool, arguments: Mapping[str, Any]) -> tuple[str, bool]:
        """(result text, whether the call failed)."""
        try:
            kwargs = tool.arguments_for(arguments, self.state)
        except (ValueError, TypeError) as exc:  # e.g. a value that is not a member of an Enum
            return f"Error: {type(exc).__name__}: {exc}", True
        timeout = tool.timeout if tool.timeout is not None else self.call_timeout
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = asyncio.run(_awaited(tool.fn(**kwargs), timeout)) if tool.is_async else tool.fn(**kwargs)
            except BaseException as exc:  # everything a tool raises is its result
                box["error"] = exc

        # A fresh daemon thread per call: a tool that never returns must not hold up the env,
        # later calls, or interpreter exit.
        thread = threading.Thread(target=target, name=f"agentgym-tool-{tool.name}", daemon=True)
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            if not tool.is_async:  # an async tool cancels itself at the same deadline
                _raise_in_thread(thread, _CutOff)
            return f"Error: tool timed out after {timeout:g}s", True
        if "error" in box:
            error = box["error"]
            if isinstance(error, _CutOff):
                return f"Error: tool timed out after {timeout:g}s", True
            return f"Error: {type(error).__name__}: {error}", True
        return _as_text(box["value"]), False

    def _record(self, name: str, arguments: Mapping[str, Any], result: str) -> None:
        self.transcript.append({"tool": name, "arguments": copy.deepcopy(dict(arguments)), "result": result})

    def _replace_state(self, state: Any, transcript: list[dict]) -> None:
        # Close a database the env owns as soon as it is replaced rather than whenever GC runs.
        if isinstance(self.state, SQLiteState) and self.state is not state:
            self.state.close()
        self.state, self.transcript = state, transcript


class _HandOff:
    """A captured state that one restore may take as it is (see :meth:`ToolEnv.fork`)."""

    def __init__(self, frozen: StateCopy):
        self._frozen: StateCopy | None = frozen

    def take(self) -> Any:
        frozen, self._frozen = self._frozen, None
        if frozen is None:
            raise SnapshotError("this fork-internal snapshot was already restored once")
        return frozen.take()


class _CutOff(BaseException):
    """Raised inside a sync tool's thread at its timeout; a BaseException so ``except Exception`` in a tool does not swallow it."""


async def _awaited(coroutine: Any, timeout: float | None) -> Any:
    scope = asyncio.timeout(timeout)
    try:
        async with scope:
            return await coroutine
    except TimeoutError:
        if scope.expired():
            raise _CutOff from None
        raise


def _raise_in_thread(thread: threading.Thread, exc_type: type[BaseException]) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exc_type))


def _collect_tools(tools: Any) -> list[Tool]:
    items: Iterable[Any] = tools if isinstance(tools, (list, tuple)) else [tools]
    collected: list[Tool] = []
    for item in items:
        if isinstance(item, Tool):
            collected.append(item)
        elif callable(item) and not isinstance(item, type):
            collected.append(tool_from_callable(item))
        else:
            collected.extend(tools_from_object(item))
    names = [tool.name for tool in collected]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"duplicate tool names: {duplicates}")
    return collected


def _field(task: Any, name: str) -> Any:
    """A task's optional field, whether the task is a mapping or an object (None when absent)."""
    return task.get(name) if isinstance(task, Mapping) else getattr(task, name, None)


def _prompt(task: Any) -> str:
    if isinstance(task, str):
        return task
    if isinstance(task, Mapping) and "prompt" in task:
        return str(task["prompt"])
    if hasattr(task, "prompt"):
        return str(task.prompt)
    raise TypeError(
        f"a task must be prompt text, a mapping with 'prompt', or have a .prompt; got {type(task).__name__}"
    )


def _as_text(value: Any) -> str:
    if value is None:
        return "OK"
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # e.g. a circular structure
        return repr(value)
