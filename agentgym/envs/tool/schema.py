"""Turning plain Python functions into tools: an OpenAI function-calling schema from type hints and the docstring.

:func:`tool_from_callable` reads a function's signature and docstring:

* the first docstring paragraph is the tool's description; Google-style ``Args:`` lines
  (``name: text`` or ``name (type): text``, continuation lines indented deeper) describe the
  parameters;
* ``str``/``int``/``float``/``bool`` map to JSON types, ``list[X]``/``tuple[X, ...]`` to arrays,
  ``dict`` to objects, ``Optional[X]`` to ``[type, "null"]``, ``Literal[...]`` and ``Enum``
  subclasses to ``enum`` (Enum arguments are converted back to members before the call);
* a parameter with a default is not required;
* a parameter named ``state`` is not part of the schema: :class:`~agentgym.envs.tool.env.ToolEnv`
  passes the episode's world state in it.

:func:`tools_from_object` makes every public method of an instance a tool. Tools may be
``async def``; the env runs them to completion in a private event loop.
"""

from __future__ import annotations

import enum
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agentgym.actions import ToolSpec

__all__ = ["Tool", "STATE_PARAMETER", "tool_from_callable", "tools_from_object", "json_schema_for"]

#: The parameter through which a tool receives the episode's world state (hidden from the model).
STATE_PARAMETER = "state"

_PRIMITIVES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns?|Yields?|Raises|Examples?|Notes?|Attributes)\s*:\s*$")
_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


@dataclass
class Tool:
    """A tool an env offers: the schema the model sees, the function that runs, and an optional own timeout.

    ``timeout`` (seconds) overrides the env's ``call_timeout`` for this tool. ``takes_state``
    says whether ``fn`` wants the world state in its ``state`` parameter; ``enums`` maps
    parameter names to the Enum classes their JSON values are converted to.
    """

    spec: ToolSpec
    fn: Callable[..., Any]
    timeout: float | None = None
    takes_state: bool = False
    enums: dict[str, type[enum.Enum]] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def arguments_for(self, arguments: Mapping[str, Any], state: Any) -> dict[str, Any]:
        """The keyword arguments for ``fn``: validated JSON values, Enum members, and the state."""
        kwargs = dict(arguments)
        for name, enum_type in self.enums.items():
            if kwargs.get(name) is not None:
                kwargs[name] = enum_type(kwargs[name])
        if self.takes_state:
            kwargs[STATE_PARAMETER] = state
        return kwargs


def tool_from_callable(
    fn: Callable[..., Any], name: str | None = None, description: str | None = None, timeout: float | None = None
) -> Tool:
    """A :class:`Tool` whose schema comes from ``fn``'s type hints and docstring (see the module docstring).

    Raises :class:`TypeError` for a signature a JSON schema cannot express (``*args``,
    ``**kwargs``, or a parameter type that is not supported).
    """
    signature = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn)
    except (NameError, TypeError) as exc:
        raise TypeError(f"cannot resolve the type hints of {fn!r}: {exc}") from exc
    summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
    tool_name = name or getattr(fn, "__name__", None)
    if not tool_name or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", tool_name):
        raise TypeError(f"cannot name a tool after {fn!r}; pass name=")
    properties: dict[str, Any] = {}
    required: list[str] = []
    enums: dict[str, type[enum.Enum]] = {}
    takes_state = False
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {tool_name}: *args and **kwargs have no JSON schema")
        if param.name == STATE_PARAMETER:
            takes_state = True
            continue
        hint = hints.get(param.name, Any)
        try:
            schema = json_schema_for(hint)
        except TypeError as exc:
            raise TypeError(f"tool {tool_name}, parameter {param.name!r}: {exc}") from None
        if param.name in arg_docs:
            schema["description"] = arg_docs[param.name]
        properties[param.name] = schema
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
        enum_type = _enum_in(hint)
        if enum_type is not None:
            enums[param.name] = enum_type
    spec = ToolSpec(
        tool_name,
        description if description is not None else summary,
        {"type": "object", "properties": properties, "required": required},
    )
    return Tool(spec, fn, timeout, takes_state, enums)


def tools_from_object(obj: Any) -> list[Tool]:
    """Every public method of ``obj`` (bound), in definition order, subclass methods first."""
    seen: set[str] = set()
    tools = []
    for cls in type(obj).__mro__[:-1]:  # object's own methods are not tools
        for attr, raw in vars(cls).items():
            if attr.startswith("_") or attr in seen:
                continue
            seen.add(attr)
            if isinstance(raw, (staticmethod, classmethod)) or inspect.isfunction(raw):
                tools.append(tool_from_callable(getattr(obj, attr)))
    return tools


def json_schema_for(hint: Any) -> dict[str, Any]:
    """The JSON schema of one parameter type; raises :class:`TypeError` when there is none."""
    if hint is Any or hint is inspect.Parameter.empty:
        return {}
    if hint in _PRIMITIVES:
        return {"type": _PRIMITIVES[hint]}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum_schema([member.value for member in hint])
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return _enum_schema(list(args))
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        if len(members) != 1:
            raise TypeError(f"unions other than Optional[X] are not supported: {hint!r}")
        schema = json_schema_for(members[0])
        if len(members) < len(args) and "type" in schema:
            schema["type"] = [schema["type"], "null"]
        return schema
    if hint in (list, tuple) or origin in (list, tuple):
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            raise TypeError(f"only tuple[X, ...] is supported, got {hint!r}")
        return {"type": "array", "items": json_schema_for(args[0])} if args else {"type": "array"}
    if hint is dict or origin is dict:
        return {"type": "object"}
    raise TypeError(f"no JSON schema for type {hint!r}")


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    kinds = {_PRIMITIVES.get(type(v)) for v in values}
    schema: dict[str, Any] = {"type": kinds.pop()} if len(kinds) == 1 and None not in kinds else {}
    schema["enum"] = values
    return schema


def _enum_in(hint: Any) -> type[enum.Enum] | None:
    """The Enum class of ``X`` or ``Optional[X]``, whose JSON values must become members."""
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return next((e for e in map(_enum_in, typing.get_args(hint)) if e is not None), None)
    return None


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(first paragraph joined into one line, {parameter: description from the Args: section})."""
    lines = doc.splitlines()
    summary_lines = []
    for line in lines:
        if not line.strip() or _SECTION.match(line.strip()):
            break
        summary_lines.append(line.strip())
    arg_docs: dict[str, str] = {}
    in_args, current, base_indent = False, None, None
    for line in lines:
        stripped = line.strip()
        section = _SECTION.match(stripped)
        if section:
            in_args = section.group(1) in ("Args", "Arguments", "Parameters")
            current, base_indent = None, None
            continue
        if not in_args or not stripped:
            continue
        indent = len(line) - len(line.lstrip())
        if base_indent is None:
            base_indent = indent
        match = _ARG_LINE.match(stripped)
        if indent == base_indent and match:
            current = match.group(1).lstrip("*")
            arg_docs[current] = match.group(2).strip()
        elif indent > base_indent and current is not None:
            arg_docs[current] = f"{arg_docs[current]} {stripped}".strip()
        else:  # text back at or left of the section's indentation ends it
            in_args, current = False, None
    return " ".join(summary_lines), arg_docs
