"""Turning a model's reply into tool calls: the formats models use, validation against tool schemas, and error text.

Agents speak to environments through tools. A tool is a :class:`ToolSpec` (an OpenAI
function-calling schema); a model reply is raw text (or an already-structured call) and
:func:`parse_action` turns it into :class:`ToolCall` objects. Recognised forms, tried in order:

1. structured input: a :class:`ToolCall`, a ``{"name": ..., "arguments": ...}`` dict, an
   OpenAI assistant message (``{"tool_calls": [...]}``) or the ``openai`` SDK's tool-call
   objects, or a list of any of these;
2. Hermes/Qwen tags in text: ``<tool_call>{"name": "bash", "arguments": {...}}</tool_call>``
   (several allowed, executed in order);
3. a bare JSON object in text: ``{"name": ..., "arguments": ...}`` or ``{"tool_calls": [...]}``;
4. fenced code blocks, when the environment maps a language to a tool
   (e.g. ```` ```python ```` → ``python(code=...)``);
5. call syntax, the BrowserGym-style mini-language: ``click(12)``, ``fill(3, "hello")``,
   ``submit()`` — positional arguments bind to the schema's properties in order.

Nothing here raises on bad model output. Malformed JSON, an unknown tool, missing or wrongly
typed arguments each produce a :class:`ToolCall` carrying ``error``; the environment reports
that error in its observation (see :func:`format_error`) together with what is allowed.
"""

from __future__ import annotations

import ast
import json
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload

__all__ = [
    "ToolSpec",
    "ToolCall",
    "ParsedAction",
    "parse_action",
    "parse_python",
    "validate_arguments",
    "format_error",
    "describe_tools",
    "tool_specs_from_openai",
]

# CPython before 3.13 keeps the AST constructor's recursion depth in one per-interpreter counter
# (gh-106905): two threads building ASTs at once (envs parsing replies in the runner's worker
# threads) can corrupt it, and a valid source then fails with "SystemError: AST constructor recursion
# depth mismatch". Every AST build in agentgym goes through parse_python, so ours never overlap; others' can
# (on 3.11 formatting any traceback parses source: asyncio or a library logging an error in another thread), and
# the counter starts afresh at every build, so a build that failed so is built again.
_AST_LOCK = threading.Lock()
_AST_TRIES = 5


@overload
def parse_python(source: str, mode: Literal["exec"] = "exec") -> ast.Module: ...
@overload
def parse_python(source: str, mode: Literal["eval"]) -> ast.Expression: ...
def parse_python(source: str, mode: str = "exec") -> ast.AST:
    """``ast.parse(source, mode=mode)``, safe beside other threads' AST builds (see above)."""
    tries = 0
    while True:
        try:
            with _AST_LOCK:
                return ast.parse(source, mode=mode)
        except SystemError as exc:
            tries += 1
            if "recursion depth mismatch" not in str(exc) or tries == _AST_TRIES:
                raise


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
    "null": (type(None),),
}

_TOOL_CALL_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)
_CALL_START = re.compile(r"(?<![\w.])([A-Za-z_][A-Za-z0-9_]*)\s*\(")


@dataclass(frozen=True)
class ToolSpec:
    """One tool an environment offers: its name, what it does, and a JSON schema of its arguments.

    ``parameters`` is a JSON-schema object (``{"type": "object", "properties": {...},
    "required": [...]}``); the order of ``properties`` is the order positional arguments bind
    to in call syntax.
    """

    name: str
    description: str
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}, "required": []})

    def to_openai(self) -> dict:
        """The OpenAI function-calling form (``{"type": "function", "function": {...}}``)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": json.loads(json.dumps(self.parameters)),
            },
        }

    @property
    def properties(self) -> Mapping[str, Any]:
        return self.parameters.get("properties", {})

    @property
    def required(self) -> Sequence[str]:
        return self.parameters.get("required", [])

    def signature(self) -> str:
        """A one-line human form, e.g. ``bash(command: string, timeout?: integer)``."""
        args = []
        for name, schema in self.properties.items():
            optional = "" if name in self.required else "?"
            args.append(f"{name}{optional}: {schema.get('type', 'any')}")
        return f"{self.name}({', '.join(args)})"


@dataclass
class ToolCall:
    """A single call the model asked for. ``error`` is set when it cannot be executed as asked."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=lambda: f"call_{os.urandom(6).hex()}")  # 12 random hex digits; uuid4 costs 10x
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_openai(self) -> dict:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments)},
        }


@dataclass
class ParsedAction:
    """Everything :func:`parse_action` found in one model reply.

    ``calls`` holds every call in order, valid or not; ``text`` is the prose outside the calls;
    ``error`` summarises what was wrong (``None`` when every call is valid and at least one
    was found, or when plain text is an acceptable reply).
    """

    calls: list[ToolCall]
    text: str = ""
    error: str | None = None

    @property
    def valid_calls(self) -> list[ToolCall]:
        return [c for c in self.calls if c.ok]


def describe_tools(tools: Sequence[ToolSpec]) -> str:
    return ", ".join(t.signature() for t in tools) or "(none)"


def format_error(problem: str, tools: Sequence[ToolSpec]) -> str:
    """The observation text for a reply that could not be executed: what was wrong and what is allowed."""
    return (
        f"Error: {problem}\n"
        f"Available tools: {describe_tools(tools)}.\n"
        'Call a tool as <tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>.'
    )


def validate_arguments(spec: ToolSpec, arguments: Any) -> str | None:
    """Check arguments against the tool's schema; return a message naming every problem, or None."""
    if not isinstance(arguments, dict):
        return f"arguments of {spec.name} must be a JSON object, got {type(arguments).__name__}"
    problems = []
    missing = [name for name in spec.required if name not in arguments]
    if missing:
        problems.append(f"missing required argument(s) {', '.join(map(repr, missing))}")
    allows_extra = spec.parameters.get("additionalProperties", False)
    for name, value in arguments.items():
        schema = spec.properties.get(name)
        if schema is None:
            if not allows_extra:
                problems.append(f"unknown argument {name!r}")
            continue
        problem = _check_value(name, value, schema)
        if problem:
            problems.append(problem)
    if not problems:
        return None
    return f"{spec.signature()}: " + "; ".join(problems)


def _check_value(name: str, value: Any, schema: Mapping[str, Any]) -> str | None:
    expected = schema.get("type")
    if expected is not None:
        types = [expected] if isinstance(expected, str) else list(expected)
        if not any(_is_type(value, t) for t in types):
            return f"argument {name!r} must be {' or '.join(types)}, got {type(value).__name__} {value!r:.40}"
    if "enum" in schema and value not in schema["enum"]:
        return f"argument {name!r} must be one of {schema['enum']}, got {value!r:.40}"
    return None


def _is_type(value: Any, json_type: str) -> bool:
    # bool is an int subclass in Python but not a JSON integer or number.
    if isinstance(value, bool) and json_type in ("integer", "number"):
        return False
    if json_type == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _JSON_TYPES.get(json_type, (object,)))


def parse_action(
    action: Any,
    tools: Sequence[ToolSpec],
    *,
    code_block_tools: Mapping[str, tuple[str, str]] | None = None,
    allow_text: bool = False,
) -> ParsedAction:
    """Parse one model reply into validated tool calls; never raises.

    Args:
        action: the model's raw text, or a structured call (see the module docstring).
        tools: the tools the environment offers now.
        code_block_tools: fenced-code language → ``(tool name, argument name)``, e.g.
            ``{"python": ("python", "code"), "bash": ("bash", "command")}``.
        allow_text: whether a reply with no tool call is acceptable (a plain answer).
    """
    by_name = {t.name: t for t in tools}
    try:
        calls, text = _extract(action, by_name, code_block_tools or {})
    except Exception as exc:  # a parser bug must not kill an episode; report it as bad input
        return ParsedAction([], str(action)[:200], format_error(f"could not parse the reply ({exc})", tools))
    for call in calls:
        if call.error is None:
            _validate_call(call, by_name)
    errors = [c.error for c in calls if c.error]
    if errors:
        error = "; ".join(errors)
    elif not calls and not allow_text:
        error = "no tool call found in the reply"
    else:
        error = None
    return ParsedAction(calls, text, error)


def _validate_call(call: ToolCall, by_name: Mapping[str, ToolSpec]) -> None:
    spec = by_name.get(call.name)
    if spec is None:
        call.error = f"unknown tool {call.name!r}"
    else:
        call.error = validate_arguments(spec, call.arguments)


def _extract(
    action: Any, by_name: Mapping[str, ToolSpec], code_block_tools: Mapping[str, tuple[str, str]]
) -> tuple[list[ToolCall], str]:
    if isinstance(action, (bytes, bytearray)):
        action = action.decode("utf-8", errors="replace")
    if not isinstance(action, str):
        return _from_structured(action), ""
    for extractor in (_from_tags, _from_bare_json):
        calls, rest = extractor(action)
        if calls:
            return calls, rest.strip()
    calls, rest = _from_fences(action, code_block_tools)
    if calls:
        return calls, rest.strip()
    return _from_call_syntax(action, by_name)


def _from_structured(obj: Any) -> list[ToolCall]:
    if obj is None:
        return []
    if isinstance(obj, ToolCall):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [call for item in obj for call in _from_structured(item)]
    if isinstance(obj, Mapping):
        if "tool_calls" in obj:
            return _from_structured(obj["tool_calls"] or [])
        if "function" in obj and isinstance(obj["function"], Mapping):
            return [_call_from_json(dict(obj["function"]), call_id=obj.get("id"))]
        return [_call_from_json(dict(obj))]
    function = getattr(obj, "function", None)  # openai SDK objects
    if function is not None:
        return [
            _call_from_json(
                {"name": getattr(function, "name", None), "arguments": getattr(function, "arguments", None)},
                call_id=getattr(obj, "id", None),
            )
        ]
    if getattr(obj, "tool_calls", None) is not None:
        return _from_structured(list(obj.tool_calls))
    if callable(obj):  # a reference solution's step that reads the observation (web tasks' steps do)
        return [
            ToolCall(
                name="?",
                error="a function is not an action: a solution step that is one takes the latest observation's "
                "text and returns the action (agentgym.run_solution plays a whole solution)",
            )
        ]
    return [ToolCall(name="?", error=f"unsupported action type {type(obj).__name__}")]


def _call_from_json(obj: Mapping[str, Any], call_id: str | None = None) -> ToolCall:
    name = obj.get("name")
    args = obj.get("arguments", obj.get("parameters", {}))
    kwargs: dict[str, Any] = {"id": call_id} if call_id else {}
    if not isinstance(name, str) or not name:
        return ToolCall(name="?", error='a tool call needs a "name" string', **kwargs)
    if isinstance(args, str):  # OpenAI sends arguments as a JSON string
        parsed, problem = _loads(args) if args.strip() else ({}, None)
        if problem:
            return ToolCall(name=name, error=f"arguments of {name} are not valid JSON ({problem})", **kwargs)
        args = parsed
    if args is None:
        args = {}
    call = ToolCall(name=name, arguments=args if isinstance(args, dict) else {}, **kwargs)
    if not isinstance(args, dict):
        call.error = f"arguments of {name} must be a JSON object, got {type(args).__name__}"
    return call


def _loads(text: str) -> tuple[Any, str | None]:
    """JSON, falling back to Python literals (models often emit single quotes or True/None)."""
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        json_error = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    try:
        return ast.literal_eval(parse_python(text.lstrip(" \t"), "eval")), None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None, json_error


def _from_tags(text: str) -> tuple[list[ToolCall], str]:
    calls = []
    for match in _TOOL_CALL_TAG.finditer(text):
        body = match.group(1).strip()
        obj, problem = _loads(body)
        if problem:
            calls.append(ToolCall(name="?", error=f"<tool_call> body is not valid JSON ({problem})"))
        elif isinstance(obj, Mapping):
            calls.extend(_from_structured(obj))
        elif isinstance(obj, list):
            calls.extend(_from_structured(obj))
        else:
            calls.append(ToolCall(name="?", error="<tool_call> body must be a JSON object"))
    return calls, _TOOL_CALL_TAG.sub("", text)


def _from_bare_json(text: str) -> tuple[list[ToolCall], str]:
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = re.sub(r"^```(?:json)?\s*|\s*```$", "", stripped)
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return [], text
    obj, problem = _loads(stripped)
    if problem or not isinstance(obj, Mapping) or not ({"name", "tool_calls", "function"} & obj.keys()):
        return [], text
    return _from_structured(obj), ""


def _from_fences(text: str, code_block_tools: Mapping[str, tuple[str, str]]) -> tuple[list[ToolCall], str]:
    if not code_block_tools:
        return [], text
    calls = []
    for match in _FENCE.finditer(text):
        target = code_block_tools.get(match.group(1).lower())
        if target is not None:
            tool, arg = target
            calls.append(ToolCall(name=tool, arguments={arg: match.group(2)}))
    rest = _FENCE.sub("", text) if calls else text
    return calls, rest


def _from_call_syntax(text: str, by_name: Mapping[str, ToolSpec]) -> tuple[list[ToolCall], str]:
    """Find ``name(args)`` for known tool names; arguments are Python literals."""
    calls, spans = [], []
    position = 0
    while True:
        match = _CALL_START.search(text, position)
        if match is None:
            break
        name = match.group(1)
        # The name check first: scanning for the closing paren of every `word(` in a long
        # reply would be quadratic in its length.
        end = _matching_paren(text, match.end() - 1) if name in by_name else None
        if end is None:
            position = match.end()
            continue
        calls.append(_call_from_source(by_name[name], text[match.start() : end + 1]))
        spans.append((match.start(), end + 1))
        position = end + 1
    rest, last = [], 0
    for start, stop in spans:
        rest.append(text[last:start])
        last = stop
    rest.append(text[last:])
    return calls, "".join(rest).strip()


def _matching_paren(text: str, open_index: int) -> int | None:
    depth, quote, escaped = 0, None, False
    for i in range(open_index, len(text)):
        ch = text[i]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i
    return None


def _call_from_source(spec: ToolSpec, source: str) -> ToolCall:
    try:
        node = parse_python(source.strip(), "eval").body
        if not isinstance(node, ast.Call):
            raise SyntaxError("not a call")
        positional = [ast.literal_eval(arg) for arg in node.args]
        keywords = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        return ToolCall(name=spec.name, error=f"could not read the arguments of {source[:80]!r} ({exc})")
    names = list(spec.properties)
    if len(positional) > len(names):
        return ToolCall(
            name=spec.name, error=f"{spec.signature()} takes {len(names)} argument(s), got {len(positional)}"
        )
    arguments = dict(zip(names, positional))
    duplicated = set(arguments) & set(keywords)
    if duplicated:
        return ToolCall(name=spec.name, error=f"argument(s) {sorted(duplicated)} given twice")
    arguments.update(keywords)
    return ToolCall(name=spec.name, arguments=arguments)


def tool_specs_from_openai(tools: Iterable[Mapping[str, Any]]) -> list[ToolSpec]:
    """The inverse of :meth:`ToolSpec.to_openai`, for tools that arrive in OpenAI form."""
    specs = []
    for tool in tools:
        fn = tool.get("function", tool)
        specs.append(ToolSpec(fn["name"], fn.get("description", ""), fn.get("parameters", {})))
    return specs
