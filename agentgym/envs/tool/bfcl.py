"""BFCL multi-turn as agentgym envs: the Berkeley Function-Calling Leaderboard's multi-turn categories on BFCL's own backends, scored by BFCL's own checker.

``BFCLMultiTurnEnv(category)`` runs one of the ``base``, ``miss_func``, ``miss_param`` and
``long_context`` categories of ``bfcl-eval`` (registered as
``agentgym/tool.bfcl-multi-turn-<category>-v0``; task ids are BFCL's test ids). An episode follows
BFCL's own inference loop (``BaseHandler.inference_multi_turn_FC``):

* The first observation is BFCL's multi-turn instructions and the first user turn. The tools
  are the function docs of the task's involved classes (``info["tools"]``).
* Each reply may call several tools; they run in order on the live backend instances (the
  episode state) and their results are BFCL's result text: strings as they are, dicts as JSON.
  A backend exception is ToolEnv's ``Error: <Type>: <message>`` result.
* A reply without a tool call ends the user turn; the next user turn is the observation. In
  ``miss_func`` the withheld functions join the tools at their turn, whose (empty) user turn is
  BFCL's "I have updated some more functions you can choose from. What about now?".
* After the last user turn the episode terminates and is scored: the calls the agent made —
  per user turn, per reply, in BFCL's string form ``name(arg=value, ...)`` — go to the official
  ``multi_turn_checker`` with the ground truth, so the verdict is BFCL's. Reward 1.0/0.0;
  ``info["grade"]`` is the checker's result (``valid``, ``error_type``, ``error_message``,
  ``details``). More than BFCL's ``MAXIMUM_STEP_LIMIT`` (20) replies with calls in one user
  turn force-quit the episode, as BFCL's inference loop does, and it is scored as BFCL's eval runner
  scores it: an entry left short of the ground truth's turns (force-quit before its last user turn)
  fails as ``multi_turn:force_terminated``; a force-quit in the last user turn goes to the checker
  with that turn's calls like any other ending.

Calls that fail schema validation (an unknown or withheld tool, a missing or mistyped
argument) are reported to the agent and neither run nor scored. The dataset's
``excluded_function`` field is ignored, as bfcl-eval itself ignores it.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import inspect
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from agentgym.extras import requires

with requires("bfcl"):
    import bfcl_eval
    from bfcl_eval.constants.default_prompts import (
        DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC,
        MAXIMUM_STEP_LIMIT,
        PROMPT_STYLE_TEMPLATES,
    )
    from bfcl_eval.constants.executable_backend_config import (
        CLASS_FILE_PATH_MAPPING,
        MULTI_TURN_FUNC_DOC_FILE_MAPPING,
        STATELESS_CLASSES,
    )
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

from agentgym.actions import ParsedAction, ToolCall, ToolSpec, parse_action, parse_python
from agentgym.core import Outcome, Verdict, select_tasks
from agentgym.env_lists import BFCL_CATEGORIES
from agentgym.envs.tool.env import ToolEnv
from agentgym.envs.tool.schema import Tool
from agentgym.task import Task, call_text

__all__ = [
    "BFCLMultiTurnEnv",
    "BFCLState",
    "check",
    "from_bfcl_call",
    "load_tasks",
    "reference_solution",
    "to_bfcl_call",
]

DATA = Path(bfcl_eval.__file__).parent / "data"
# BFCL's own system prompt, less its output-format part: here the tools come as schemas.
INSTRUCTIONS = " ".join(PROMPT_STYLE_TEMPLATES["classic"][part] for part in ("persona", "task", "multiturn_behavior"))


@dataclass
class BFCLState:
    """An episode's world: the live backend instances and where the conversation stands (all of it pickled by snapshots)."""

    instances: dict[str, Any]
    turn: int = 0
    #: Per user turn, per reply with executed calls, those calls in BFCL's string form.
    calls: list[list[list[str]]] = field(default_factory=lambda: [[]])


class BFCLMultiTurnEnv(ToolEnv):
    """One BFCL multi-turn category as an AgentEnv (see the module docstring).

    Args:
        category: ``base``, ``miss_func``, ``miss_param`` or ``long_context``.
        tasks: the category's tests to run (BFCL test ids, or a pattern such as
            ``"multi_turn_base_1?"``; default: all).
        max_turns: replies before the episode is truncated (default: enough for every user
            turn to use BFCL's step limit).
        call_timeout: seconds one backend call may run.
    """

    allow_text_replies = True

    def __init__(
        self,
        category: str = "base",
        *,
        tasks: str | Sequence[str] | None = None,
        max_turns: int | None = None,
        call_timeout: float | None = 10.0,
        **kwargs: Any,
    ):
        if category not in BFCL_CATEGORIES:
            raise ValueError(f"category must be one of {BFCL_CATEGORIES}, got {category!r}")
        entries = load_tasks(category)
        selected = {task_id: entries[task_id] for task_id in select_tasks(entries, tasks)}
        classes = sorted({name for task in selected.values() for name in task["involved_classes"]})
        tools = [
            Tool(_tool_spec(doc), functools.partial(_invoke, name, doc["name"]), takes_state=True)
            for name in classes
            for doc in _function_docs(name)
        ]
        most_turns = max(len(task["question"]) for task in selected.values())
        super().__init__(
            tools,
            selected,
            state_factory=functools.partial(_instances, category),
            max_turns=max_turns or most_turns * (MAXIMUM_STEP_LIMIT + 1),
            call_timeout=call_timeout,
            variant=category,
            **kwargs,
        )
        self.category = category

    def tasks(self) -> list[Task]:
        """The category's tests (category: the BFCL category), each replaying its ground truth as its reference solution."""
        return [
            Task(
                task_id,
                _user_turn(self.task_data[task_id], 0),
                self.category,
                {"involved_classes": list(self.task_data[task_id]["involved_classes"])},
                functools.partial(reference_solution, self.task_data[task_id]),
            )
            for task_id in self.task_ids()
        ]

    # ------------------------------------------------------------------ the episode
    def tools(self) -> list[ToolSpec]:
        if self.state is None:
            return []
        task = self.task_data[self.task_id]
        withheld = {
            name
            for turn, names in task.get("missed_function", {}).items()
            if int(turn) > self.state.turn
            for name in names
        }
        return [
            self._tools[doc["name"]].spec
            for cls in task["involved_classes"]
            for doc in _function_docs(cls)
            if doc["name"] not in withheld
        ]

    def parse(self, action: Any) -> ParsedAction:
        # BFCL executes whatever the model calls on the task's backend objects and lets them
        # object to bad arguments; its own ground truth passes a string where a doc says
        # integer and calls a function that is withheld at that turn. So replies are parsed
        # against every function of the involved classes, argument names kept (call syntax binds
        # positional arguments by them) but types unchecked; the schemas the model sees in
        # tools() stay exact.
        return parse_action(
            action, _lenient_specs(tuple(self.task_data[self.task_id]["involved_classes"])), allow_text=True
        )

    def _setup(self, task_id: str) -> str:
        task = self.task_data[task_id]
        self._replace_state(self.state_factory(task), [])
        return f"{INSTRUCTIONS}\n\n{_user_turn(task, 0)}"

    def _act(self, parsed: ParsedAction) -> Outcome:
        if not parsed.calls:
            return super()._act(parsed)
        turn_calls = self.state.calls[-1]
        turn_calls.append([])
        outcome = super()._act(parsed)
        if not turn_calls[-1]:  # BFCL's eval runner drops replies that decode to no call
            turn_calls.pop()
        if len(turn_calls) > MAXIMUM_STEP_LIMIT:
            # BFCL's loop ends the whole entry here, keeping the calls of the turns played so far.
            return self._finish(
                None,
                f"{outcome.text}\n\nModel has been forced to quit after {MAXIMUM_STEP_LIMIT} steps.",
                error=outcome.error,
            )
        return outcome

    def _call_tool(self, call: ToolCall) -> Outcome:
        outcome = super()._call_tool(call)
        self.state.calls[-1][-1].append(to_bfcl_call(call.name, call.arguments))
        return outcome

    def _reply_without_calls(self, text: str) -> Outcome:
        task = self.task_data[self.task_id]
        self.state.turn += 1
        if self.state.turn == len(task["question"]):
            return self._finish(text, "The conversation is over.")
        self.state.calls.append([])
        return Outcome(_user_turn(task, self.state.turn))

    def _grade(self, answer: str | None) -> Verdict:
        verdict = self.verdict()
        return Verdict(float(verdict["valid"]), bool(verdict["valid"]), details=verdict)

    def verdict(self) -> dict:
        """BFCL's eval runner on the calls made so far (``_evaluate_single_multi_turn_entry``): an entry
        with fewer turns than the ground truth fails as force-terminated, any other goes to the checker."""
        task = self.task_data[self.task_id]
        turns, expected = len(self.state.calls), len(task["ground_truth"])
        if turns != expected:
            return {
                "valid": False,
                "error_type": "multi_turn:force_terminated",
                "error_message": (
                    "Model was force-terminated during inference phase. The length of the model result turns "
                    f"({turns}) does not match the length of the ground truth turns ({expected})."
                ),
            }
        return check(task, self.state.calls)


def _user_turn(task: Mapping[str, Any], turn: int) -> str:
    messages = task["question"][turn]
    if not messages and str(turn) in task.get("missed_function", {}):
        # BFCL's stand-in for the empty user turn at which withheld functions arrive.
        return DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC
    return "\n\n".join(message["content"] for message in messages)


def check(task: Mapping[str, Any], calls: list[list[list[str]]]) -> dict:
    """BFCL's ``multi_turn_checker`` on ``calls`` (per user turn, per reply, call strings) against the task's ground truth.

    The checker caches backend instances in its module's globals under the model name, so each
    evaluation gets a fresh name and its instances are removed afterwards: no state leaks
    between evaluations and nothing accumulates.
    """
    model_name = f"agentgym_{uuid.uuid4().hex}"
    test_entry = {key: task[key] for key in ("id", "initial_config", "involved_classes")}
    try:
        return multi_turn_checker(calls, task["ground_truth"], test_entry, task["id"].rsplit("_", 1)[0], model_name)
    finally:
        cache = vars(multi_turn_utils)
        for name in [name for name in list(cache) if name.startswith(model_name)]:
            cache.pop(name, None)


def to_bfcl_call(name: str, arguments: Mapping[str, Any]) -> str:
    """A call in BFCL's string form, exactly as BFCL decodes a function-calling model's call."""
    return f"{name}({','.join(f'{key}={value!r}' for key, value in arguments.items())})"


def from_bfcl_call(call: str, involved_classes: list[str]) -> ToolCall:
    """A ground-truth call string as a ToolCall, positional arguments bound to their parameter names."""
    node = cast(ast.Call, parse_python(call, "eval").body)
    name = cast(ast.Name, node.func).id
    args = [ast.literal_eval(arg) for arg in node.args]
    kwargs = {keyword.arg: ast.literal_eval(keyword.value) for keyword in node.keywords}
    if args:
        # BFCL binds names to the last involved class that has the method; so do we.
        owner = next(cls for cls in reversed(involved_classes) if name in {d["name"] for d in _function_docs(cls)})
        method = getattr(_backend_class(owner), name)
        kwargs = dict(inspect.signature(method).bind(None, *args, **kwargs).arguments)
        kwargs.pop(next(iter(kwargs)))  # self
    return ToolCall(name, kwargs)


def reference_solution(task: Mapping[str, Any]) -> list[str]:
    """The replies that replay a task's ground truth: per user turn, one reply with that turn's calls
    (when it has any), then a text reply that ends the turn."""
    replies = []
    for calls in task["ground_truth"]:
        if calls:
            tool_calls = [from_bfcl_call(call, task["involved_classes"]) for call in calls]
            replies.append("\n".join(call_text(call.name, call.arguments) for call in tool_calls))
        replies.append("Done.")
    return replies


@functools.cache
def load_tasks(category: str) -> dict[str, dict]:
    """Test id → BFCL test entry with its ``ground_truth`` (per user turn, call strings)."""
    tasks = {}
    with (
        open(DATA / f"BFCL_v4_multi_turn_{category}.json") as entries,
        open(DATA / "possible_answer" / f"BFCL_v4_multi_turn_{category}.json") as answers,
    ):
        for entry_line, answer_line in zip(entries, answers):
            entry, answer = json.loads(entry_line), json.loads(answer_line)
            if entry["id"] != answer["id"]:
                raise ValueError(f"BFCL data out of order: {entry['id']} vs {answer['id']}")
            tasks[entry["id"]] = {**entry, "ground_truth": answer["ground_truth"]}
    return tasks


def _instances(category: str, task: Mapping[str, Any]) -> BFCLState:
    """The task's backend instances, set up as BFCL's execute_multi_turn_func_call sets them up."""
    instances = {}
    for name in task["involved_classes"]:
        instance = _backend_class(name)()
        if name not in STATELESS_CLASSES:
            instance._load_scenario(
                copy.deepcopy(task["initial_config"].get(name, {})), long_context=category == "long_context"
            )
        instances[name] = instance
    return BFCLState(instances)


def _invoke(class_name: str, method: str, /, state: BFCLState, **arguments: Any) -> str:
    result = getattr(state.instances[class_name], method)(**arguments)
    # BFCL's rendering of results (execute_multi_turn_func_call), which is what its models see.
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


@functools.cache
def _lenient_specs(classes: tuple[str, ...]) -> list[ToolSpec]:
    """Every function of these classes with its argument names and no type or presence checks (see ``parse``)."""
    specs = {}
    for cls in classes:
        for doc in _function_docs(cls):
            names = list(doc.get("parameters", {}).get("properties", {}))
            specs[doc["name"]] = ToolSpec(
                doc["name"],
                doc.get("description", ""),
                {
                    "type": "object",
                    "properties": {name: {} for name in names},
                    "required": [],
                    "additionalProperties": True,
                },
            )
    return list(specs.values())


def _tool_spec(doc: Mapping[str, Any]) -> ToolSpec:
    """BFCL's function doc as an OpenAI schema, with BFCL's own type mapping (its convert_to_tool)."""
    parameters = copy.deepcopy(dict(doc["parameters"]))
    parameters["type"] = "object"
    parameters["properties"] = {key: _openai_type(value) for key, value in parameters.get("properties", {}).items()}
    return ToolSpec(doc["name"], doc["description"], parameters)


def _openai_type(schema: dict) -> dict:
    gorilla_type = schema.get("type", "string")
    if gorilla_type == "float":
        schema["format"] = "float"
        schema["description"] = schema.get("description", "") + " This is a float type value."
    schema["type"] = GORILLA_TO_OPENAPI.get(gorilla_type, "string")
    if "properties" in schema:
        schema["properties"] = {key: _openai_type(value) for key, value in schema["properties"].items()}
    if "items" in schema:
        schema["items"] = _openai_type(schema["items"])
    return schema


@functools.cache
def _function_docs(class_name: str) -> list[dict]:
    with open(DATA / "multi_turn_func_doc" / MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]) as docs:
        return [json.loads(line) for line in docs if line.strip()]


def _backend_class(class_name: str) -> type:
    return getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)
