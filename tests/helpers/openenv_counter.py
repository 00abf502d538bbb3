"""Winning play of the OpenEnv counter app (tests/helpers/openenv_apps.py) through an agentgym env over it."""

import re

from tests.helpers.tool_calls import call


def solve_counter(text: str, reply_as_tool: bool = False) -> str:
    """The counter's winning move for the last observation: add up to the target, then submit."""
    target = int(re.search(r"Reach (\d+)", text).group(1))
    counter = int(re.findall(r"Counter: (\d+)", text)[-1])
    if reply_as_tool:
        return call("move", op="submit") if counter >= target else call("move", op="add", n=min(10, target - counter))
    return "submit" if counter >= target else f"add {min(10, target - counter)}"


def play_counter(env, first_text: str, reply_as_tool: bool = False) -> tuple:
    """Play a counter episode to its end with :func:`solve_counter`; the last step's five values."""
    history = [first_text]
    while True:
        step = env.step(solve_counter("\n".join(history), reply_as_tool))
        history.append(step[0]["text"])
        if step[2] or step[3]:
            return step
