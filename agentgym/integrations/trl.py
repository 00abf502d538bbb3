"""agentgym envs in TRL's own ``GRPOTrainer``: :func:`environment_factory` and :func:`task_dataset` from an env id, and :func:`agentgym_reward`.

TRL 1.16's ``GRPOTrainer(environment_factory=...)`` takes a zero-argument callable that builds
environment objects. It probes one object at start: its ``reset`` method and every other public
method, which become the model's tools (their schemas are made by transformers' ``get_json_schema``
from type hints and a Google-style docstring). Per rollout it calls ``reset(**row)`` with the
dataset row and appends the returned text to the row's user message, runs the tool calls the model
makes on that rollout's object, and ends the rollout at the first reply without a tool call. Reward
functions receive the objects as ``environments=``.

Here::

    factory = environment_factory("agentgym/tool.keychain-v0", num_tasks=50)   # env kwargs pass through
    dataset = task_dataset("agentgym/tool.keychain-v0", num_tasks=50)          # prompt, task_id (, environment)
    GRPOTrainer(model, reward_funcs=agentgym_reward, train_dataset=dataset, environment_factory=factory, ...)

* Each object (:class:`AgentgymEnvironment`) wraps one agentgym env. ``reset(task_id=..., **row)``
  resets it to the row's task and returns the first observation's text; without a ``task_id`` the
  env draws a task (so ``train_dataset=None`` with ``max_steps`` works too).
* Its tool methods are generated from the env's tool schemas (``info["tools"]``): real signatures
  (``__signature__``, ``__annotations__``; JSON types become ``str``/``int``/``float``/``bool``,
  ``list[X]``, ``dict``, ``Literal[...]``) and a Google-style docstring. A call becomes
  ``env.step(ToolCall(name, arguments))`` and returns the observation's text; the arguments are the
  model's, unchecked by Python, so a wrong or missing argument reaches the env, whose error text
  (``info["error"]``, with the allowed forms) is the result, never an exception.
* Envs that take a plain-text reply (BFCL, where a reply without calls ends the user's turn and the
  next user turn follows) get one more tool, ``reply(message)``: TRL's loop ends a rollout at the
  first reply without a tool call and never shows the env's next user turn, so a multi-turn
  conversation continues through this tool instead. The final reply of a rollout still reaches the
  env (:func:`agentgym_reward` delivers it), so an env whose episode ends with a text answer is graded.
* **Tools that differ per task** (BFCL: the task's API classes). TRL shows one tool list per
  environment factory, so the selected tasks are grouped by their tool set (read from
  ``env.tools()``, or per task after a reset when the env lists none before one). One group gives a
  single factory; several give a ``{group: factory}`` dict, TRL's multi-environment form, and
  :func:`task_dataset` adds the ``environment`` column that routes each row to its group, so every
  prompt shows exactly its task's tools. Tools an env adds during an episode (BFCL ``miss_func``'s
  withheld functions) are not in the group's list and cannot be called through TRL.
* The reward is the env's: :func:`agentgym_reward` returns each episode's summed step rewards (an
  agentgym env rewards only on positive evidence at the graded step), ``None`` for an episode the
  env itself broke (``info["env_error"]``), which TRL leaves out of the sum.
* The factory is a picklable dataclass (for TRL's async workers); the class it builds is made once
  per process. An env is closed when its object is collected or at interpreter exit.

Only the observation's text reaches the model (a screenshot is not passed on). The tokenizer must
have a tool-calling chat template TRL can parse: TRL sets the response parser for the templates it
knows (Qwen, Llama, ...); for another template set ``tokenizer.response_template`` yourself.
"""

from __future__ import annotations

import inspect
import json
import keyword
import re
import threading
import typing
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentgym.actions import ToolCall, ToolSpec
from agentgym.extras import requires
from agentgym.registration import make_env_factory
from agentgym.task import Task

__all__ = [
    "REPLY_TOOL",
    "AgentgymEnvironment",
    "EnvironmentFactory",
    "agentgym_reward",
    "environment_factory",
    "task_dataset",
]

#: The default name of the tool through which the model replies in text to envs that take text replies.
REPLY_TOOL = "reply"

_SCALARS: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "null": type(None)}
# Words that transformers' docstring parser reads as section headers or choice lists wherever they appear.
_DOCSTRING_MARKERS = re.compile(r"\b(Args|Returns|Raises):|\(choices:")


class AgentgymEnvironment:
    """One agentgym env as a TRL environment: ``reset(**row)``, one method per tool, the episode's reward.

    Built by an :class:`EnvironmentFactory` (the tool methods live on a subclass made per tool
    set); read its episode through :attr:`env`, :attr:`reward`, :attr:`done` and :attr:`calls`.
    Every other public method is a tool, so this class has no other public methods.
    """

    #: The tools' names, in the env's order (the reply tool last, when there is one).
    tool_names: tuple[str, ...] = ()
    #: The name of the text-reply tool, or None when the env does not take text replies.
    reply_tool: str | None = None

    def __init__(self, env: Any):
        self._env = env
        # Close the env when this object goes away, or at exit: TRL keeps its objects in a pool and never closes them.
        self._finalizer = weakref.finalize(self, env.close)
        self._reward = 0.0
        self._done = False
        self._env_error: str | None = None
        self._calls: list[dict[str, Any]] = []

    def reset(self, task_id: str | None = None, **row: Any) -> str:
        """Start an episode on the row's task (a task the env draws when the row has no ``task_id``); returns its first observation."""
        observation, _ = self._env.reset(options=None if task_id is None else {"task_id": task_id})
        self._reward, self._done, self._env_error, self._calls = 0.0, False, None, []
        return observation["text"]

    @property
    def env(self) -> Any:
        """The agentgym env (as ``gymnasium.make`` returned it)."""
        return self._env

    @property
    def reward(self) -> float:
        """The episode's reward so far: the sum of its steps' rewards."""
        return self._reward

    @property
    def done(self) -> bool:
        """Whether the episode has ended (terminated or truncated)."""
        return self._done

    @property
    def calls(self) -> list[dict[str, Any]]:
        """What reached the env this episode: ``{"tool", "arguments", "observation", "error"}`` per tool or reply call."""
        return self._calls

    def _call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        return self._step(ToolCall(name, arguments), name, arguments)

    def _reply(self, message: str) -> str:
        return self._step(message, self.reply_tool or REPLY_TOOL, {"message": message})

    def _end(self, final_reply: str | None) -> None:
        """Give the rollout's final text reply to an env that takes one (it may end and grade the episode)."""
        if final_reply is not None and not self._done and _takes_text_replies(self._env):
            self._step(final_reply, None, {"message": final_reply})

    def _step(self, action: Any, name: str | None, arguments: dict[str, Any]) -> str:
        observation, reward, terminated, truncated, info = self._env.step(action)
        self._reward += float(reward)
        self._done = self._done or bool(terminated or truncated)
        self._env_error = self._env_error or info.get("env_error")
        text = observation["text"]
        self._calls.append({"tool": name, "arguments": arguments, "observation": text, "error": info.get("error")})
        return text

    def _close(self) -> None:
        """Close the env now (it is closed anyway when this object is collected)."""
        self._finalizer()


@dataclass(frozen=True)
class EnvironmentFactory:
    """A picklable zero-argument callable that builds :class:`AgentgymEnvironment` objects for one tool set of an env.

    Made by :func:`environment_factory`; ``tools`` are the tool schemas the objects offer (as
    methods), ``reply_tool`` the name of the text-reply tool (None: none).
    """

    env_id: str
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    tools: tuple[ToolSpec, ...] = ()
    reply_tool: str | None = None

    def __call__(self) -> AgentgymEnvironment:
        cls = _environment_class(self)
        return cls(make_env_factory(self.env_id, dict(self.env_kwargs))())


def environment_factory(
    env_id: str, *, reply_tool: str | None = REPLY_TOOL, **env_kwargs: Any
) -> EnvironmentFactory | dict[str, EnvironmentFactory]:
    """What ``GRPOTrainer(environment_factory=...)`` takes for the env ``env_id`` built with ``env_kwargs``.

    A single :class:`EnvironmentFactory` when all the env's tasks (those its ``tasks=``/``split``
    options select) offer the same tools; otherwise one per tool set, keyed by the group's first
    task id, with :func:`task_dataset`'s ``environment`` column routing each row to its group.
    ``reply_tool`` names the text-reply tool offered by envs that take text replies (None: not offered).
    """
    catalog = _catalog(env_id, env_kwargs)
    reply = reply_tool if catalog.text_replies else None
    factories = {
        group: EnvironmentFactory(env_id, dict(env_kwargs), tools, reply) for group, tools in catalog.groups.items()
    }
    for factory in factories.values():
        _environment_class(factory)  # bad tool names fail here, not in the trainer
    return next(iter(factories.values())) if len(factories) == 1 else factories


def task_dataset(env_id: str, **env_kwargs: Any) -> Any:
    """The env's tasks as TRL's ``train_dataset``: a ``datasets.Dataset`` with ``prompt``, ``task_id`` and, when the tasks' tools differ, ``environment``.

    ``prompt`` is an empty user message: ``reset`` returns the task's first observation, which TRL
    appends to it. Rows follow ``env.tasks()`` order.
    """
    with requires("train"):
        from datasets import Dataset

    catalog = _catalog(env_id, env_kwargs)
    columns: dict[str, list] = {
        "prompt": [[{"role": "user", "content": ""}] for _ in catalog.tasks],
        "task_id": [task.id for task in catalog.tasks],
    }
    if len(catalog.groups) > 1:
        columns["environment"] = [catalog.group_of[task.id] for task in catalog.tasks]
    return Dataset.from_dict(columns)


def agentgym_reward(
    completions: Sequence[Any], environments: Sequence[Any] | None = None, **kwargs: Any
) -> list[float | None]:
    """A ``GRPOTrainer`` reward function: each rollout's episode reward, read from its environment object.

    The rollout's final reply (its last assistant message, when it calls no tool) is first given
    to an env that takes text replies, which may end and grade the episode. ``None`` (left out by
    TRL) for a rollout whose env broke, or whose environment is not an agentgym one (a mixed run).
    """
    if environments is None:
        raise ValueError(
            "agentgym_reward scores the environments of GRPOTrainer(environment_factory=...); none were passed"
        )
    rewards: list[float | None] = []
    for completion, environment in zip(completions, environments, strict=True):
        if not isinstance(environment, AgentgymEnvironment):
            rewards.append(None)
            continue
        environment._end(_final_reply(completion))
        rewards.append(None if environment._env_error else environment.reward)
    return rewards


# ---------------------------------------------------------------------- tasks and their tool sets
@dataclass(frozen=True)
class _Catalog:
    """An env's tasks, grouped by the tools they offer."""

    tasks: list[Task]
    groups: dict[str, tuple[ToolSpec, ...]]  # group name (its first task's id) → tools
    group_of: dict[str, str]  # task id → group name
    text_replies: bool


_catalogs: dict[str, _Catalog] = {}
_catalogs_lock = threading.Lock()


def _catalog(env_id: str, env_kwargs: Mapping[str, Any]) -> _Catalog:
    """Probe the env once per process and configuration (environment_factory and task_dataset must agree)."""
    key = repr((env_id, sorted(env_kwargs.items())))
    with _catalogs_lock:
        if key not in _catalogs:
            _catalogs[key] = _probe(env_id, env_kwargs)
        return _catalogs[key]


def _probe(env_id: str, env_kwargs: Mapping[str, Any]) -> _Catalog:
    env = make_env_factory(env_id, dict(env_kwargs))()
    try:
        base = env.unwrapped
        tasks = list(base.tasks())
        if not tasks:
            raise ValueError(f"{env_id} with {dict(env_kwargs)} has no tasks")
        shared = tuple(base.tools())
        tool_sets: dict[str, tuple[ToolSpec, ...]] = {}
        for task in tasks:
            if shared:
                tool_sets[task.id] = shared
            else:  # tools known only once a task is set up (BFCL: the task's API classes)
                env.reset(options={"task_id": task.id})
                tool_sets[task.id] = tuple(base.tools())
        text_replies = _takes_text_replies(env)
    finally:
        env.close()
    groups: dict[str, tuple[ToolSpec, ...]] = {}
    by_signature: dict[str, str] = {}
    group_of: dict[str, str] = {}
    for task in tasks:
        tools = tool_sets[task.id]
        signature = json.dumps([tool.to_openai() for tool in tools], sort_keys=True)
        group = by_signature.setdefault(signature, task.id)
        groups.setdefault(group, tools)
        group_of[task.id] = group
    return _Catalog(tasks, groups, group_of, text_replies)


def _takes_text_replies(env: Any) -> bool:
    return bool(getattr(env.unwrapped, "allow_text_replies", False))


# ---------------------------------------------------------------------- generated tool methods
_classes: dict[str, type[AgentgymEnvironment]] = {}
_classes_lock = threading.Lock()
# Names a tool cannot take: TRL's own (reset, get_reward) and this class's attributes.
_RESERVED = {"get_reward", "self", *dir(AgentgymEnvironment)}


def _environment_class(factory: EnvironmentFactory) -> type[AgentgymEnvironment]:
    """The :class:`AgentgymEnvironment` subclass with ``factory``'s tools as methods (made once per process)."""
    key = json.dumps(
        [factory.env_id, [tool.to_openai() for tool in factory.tools], factory.reply_tool], sort_keys=True, default=str
    )
    with _classes_lock:
        cls = _classes.get(key)
        if cls is None:
            cls = _classes[key] = _make_class(factory)
        return cls


def _make_class(factory: EnvironmentFactory) -> type[AgentgymEnvironment]:
    name = "".join(part.capitalize() for part in re.split(r"[^0-9A-Za-z]+", factory.env_id.split("/")[-1]) if part)
    qualname = f"{name}Environment"
    namespace: dict[str, Any] = {"__module__": __name__, "__qualname__": qualname}
    tools = [(tool, False) for tool in factory.tools]
    # The env's own tool of that name, if it has one, stays the env's.
    reply = factory.reply_tool if factory.reply_tool not in {tool.name for tool in factory.tools} else None
    if reply is not None:
        tools.append((_reply_spec(reply), True))
    for tool, is_reply in tools:
        _check_name(tool.name, f"{factory.env_id}: tool")
        namespace[tool.name] = _tool_method(tool, qualname, is_reply=is_reply)
    namespace["tool_names"] = tuple(tool.name for tool, _ in tools)
    namespace["reply_tool"] = reply
    return type(qualname, (AgentgymEnvironment,), namespace)


def _reply_spec(name: str) -> ToolSpec:
    return ToolSpec(
        name,
        "Reply to the user in plain text instead of calling a tool. This ends your turn; the result is what "
        "the user says next, or the end of the conversation.",
        {
            "type": "object",
            "properties": {"message": {"type": "string", "description": "Your reply to the user."}},
            "required": ["message"],
        },
    )


def _check_name(name: str, what: str) -> None:
    if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_") or name in _RESERVED:
        raise ValueError(
            f"{what} name {name!r} cannot be a method of a TRL environment (it must be a public Python "
            f"identifier other than {sorted(n for n in _RESERVED if not n.startswith('_'))})"
        )


def _tool_method(spec: ToolSpec, owner: str, *, is_reply: bool) -> Callable[..., str]:
    """A method whose signature and docstring describe ``spec`` and whose body hands the model's arguments to the env."""
    if is_reply:

        def method(self: AgentgymEnvironment, /, **arguments: Any) -> str:
            message = arguments.get("message", "")
            return self._reply(message if isinstance(message, str) else json.dumps(message))

    else:

        def method(self: AgentgymEnvironment, /, **arguments: Any) -> str:
            # Exactly what the model sent: the env validates it and answers a bad call with its error text.
            return self._call_tool(spec.name, arguments)

    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    arg_docs = []
    required = set(spec.required)
    for name, schema in spec.properties.items():
        _check_name(name, f"tool {spec.name}: parameter")
        hint = _python_type(schema)
        annotations[name] = hint
        # Keyword-only, so that required and optional parameters may come in the schema's order.
        default = inspect.Parameter.empty if name in required else _default(schema)
        parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint))
        arg_docs.append(f"    {name}: {_argument_doc(name, schema)}")
    method.__name__ = spec.name
    method.__qualname__ = f"{owner}.{spec.name}"
    method.__doc__ = _docstring_text(spec.description) or f"Call the {spec.name} tool."
    if arg_docs:
        method.__doc__ += "\n\nArgs:\n" + "\n".join(arg_docs)
    method.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = {**annotations, "return": str}
    return method


def _python_type(schema: Any) -> Any:
    """The type hint from which transformers' ``get_json_schema`` gives back (as nearly as it can) this JSON schema."""
    if not isinstance(schema, Mapping):
        return Any
    values = schema.get("enum")
    if isinstance(values, list) and values and all(type(v) in (str, int, float, bool, type(None)) for v in values):
        return Literal[tuple(values)]
    kind = schema.get("type")
    if isinstance(kind, list):
        members = tuple(dict.fromkeys(_python_type({**schema, "type": k}) for k in kind))
        return typing.Union[members] if members else Any  # noqa: UP007 - built from a runtime tuple
    if kind == "array":
        items = schema.get("items")
        return list[_python_type(items)] if isinstance(items, Mapping) and items else list  # type: ignore[misc]
    if kind == "object":
        extra = schema.get("additionalProperties")
        return dict[str, _python_type(extra)] if isinstance(extra, Mapping) and extra else dict  # type: ignore[misc]
    return _SCALARS.get(kind, Any) if isinstance(kind, str) else Any


def _default(schema: Any) -> Any:
    default = schema.get("default") if isinstance(schema, Mapping) else None
    # Only a JSON scalar is a safe Python default (a shared list or dict would be mutable state).
    return default if type(default) in (str, int, float, bool) else None


def _argument_doc(name: str, schema: Any) -> str:
    text = _docstring_text(schema.get("description", "") if isinstance(schema, Mapping) else "")
    if isinstance(schema, Mapping) and _is_nested(schema):
        # A Python type hint cannot carry a nested object's fields; the model gets them in the description.
        shape = {key: value for key, value in schema.items() if key != "description"}
        text = f"{text} JSON schema: {_docstring_text(json.dumps(shape))}".strip()
    return text or f"The {name} argument."


def _is_nested(schema: Mapping[str, Any]) -> bool:
    items = schema.get("items")
    return "properties" in schema or (isinstance(items, Mapping) and ("properties" in items or "items" in items))


def _docstring_text(text: Any) -> str:
    """One line that transformers' Google-style docstring parser reads back as it is."""
    one_line = " ".join(str(text or "").split())
    return _DOCSTRING_MARKERS.sub(lambda match: match.group(0).replace(":", " -"), one_line)


def _final_reply(completion: Any) -> str | None:
    """The text of a rollout's last message when it is an assistant reply without tool calls (else None)."""
    if isinstance(completion, str):
        return completion
    if not completion:
        return None
    last = completion[-1]
    if not isinstance(last, Mapping) or last.get("role") != "assistant" or last.get("tool_calls"):
        return None
    content = last.get("content") or ""
    if isinstance(content, list):  # content blocks
        return "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    return str(content)
