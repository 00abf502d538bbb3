"""Tool-call text as a policy writes it (Hermes/Qwen `<tool_call>` tags), for tests that drive envs through `step`."""

import json


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"
