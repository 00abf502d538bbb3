"""ToolEnv: schemas from type hints and docstrings, running tools (sync, async, failing, hanging), snapshots and exact forks."""

import asyncio
import enum
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal

import pytest
from gymnasium.utils.env_checker import check_env

from agentgym.envs.tool import SQLiteState, Tool, ToolEnv, tool_from_callable, tools_from_object
from tests.helpers.tool_calls import call

ROOT = Path(__file__).resolve().parents[3]


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


def search(
    query: str,
    limit: int = 10,
    scale: float = 1.0,
    exact: bool = False,
    tags: list[str] | None = None,
    options: dict = None,
    mode: Literal["fast", "deep"] = "fast",
    color: Color | None = None,
    state=None,
):
    """Search the catalogue.

    Longer explanation that is not part of the description.

    Args:
        query: what to look for,
            over several lines.
        limit (int): at most this many results.
        state: the world state (hidden from the model).

    Returns:
        The matches.
    """


def test_schema_from_hints_and_docstring():
    tool = tool_from_callable(search)
    assert tool.takes_state and tool.enums == {"color": Color}
    assert tool.spec.to_openai() == {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the catalogue.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "what to look for, over several lines."},
                    "limit": {"type": "integer", "description": "at most this many results."},
                    "scale": {"type": "number"},
                    "exact": {"type": "boolean"},
                    "tags": {"type": ["array", "null"], "items": {"type": "string"}},
                    "options": {"type": "object"},
                    "mode": {"type": "string", "enum": ["fast", "deep"]},
                    "color": {"type": ["string", "null"], "enum": ["red", "blue"]},
                },
                "required": ["query"],
            },
        },
    }


def test_schema_overrides_methods_and_unsupported_types():
    def ping() -> str:
        return "pong"

    tool = tool_from_callable(ping, name="healthcheck", description="Is it up?", timeout=2)
    assert (tool.spec.name, tool.spec.description, tool.timeout) == ("healthcheck", "Is it up?", 2)
    assert tool.spec.parameters == {"type": "object", "properties": {}, "required": []}

    class Shop:
        def buy(self, item: str, n: int = 1) -> str:
            """Buy something."""
            return f"{n} {item}"

        def _private(self):
            pass

        @property
        def stock(self):
            raise AssertionError("properties are not tools")

    (buy,) = tools_from_object(Shop())
    assert buy.spec.name == "buy" and buy.spec.required == ["item"] and buy.fn("tea") == "1 tea"

    def bad(where: complex):
        pass

    with pytest.raises(TypeError, match="where"):
        tool_from_callable(bad)


# ------------------------------------------------------------------ an env over Python state
def deposit(amount: int, state: dict) -> str:
    """Add money."""
    state["balance"] += amount
    state["log"].append(amount)
    return f"balance {state['balance']}"


async def fetch_rate(currency: Literal["EUR", "USD"], state: dict) -> float:
    """An exchange rate, fetched asynchronously."""
    await asyncio.sleep(0.01)
    return {"EUR": 0.5, "USD": 1.0}[currency] * len(state["log"])


def explode(state: dict) -> str:
    """Always fails."""
    raise KeyError("vault")


def hang(seconds: float = 60.0, state: dict = None) -> str:
    """Never returns in time."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:  # busy Python code: the timeout's exception stops it
        pass
    state["balance"] = -1
    return "finished"


async def hang_async(state: dict) -> str:
    """Awaits forever."""
    await asyncio.sleep(60)
    state["balance"] = -1
    return "finished"


TASKS = {
    "reach-30": {"prompt": "Get the balance to 30.", "goal": 30},
    "reach-5": {"prompt": "Get the balance to 5.", "goal": 5},
}


def check(task, state, transcript):
    return float(state["balance"] == task["goal"]), state["balance"] == task["goal"]


def make_env(**kwargs):
    return ToolEnv(
        [
            deposit,
            fetch_rate,
            explode,
            hang,
            Tool(tool_from_callable(hang_async).spec, hang_async, timeout=0.2, takes_state=True),
        ],
        TASKS,
        state_factory=lambda task: {"balance": 0, "log": []},
        check=check,
        call_timeout=0.3,
        **kwargs,
    )


def test_calls_run_in_order_sync_and_async():
    env = make_env()
    obs, info = env.reset(options={"task_id": "reach-30"})
    assert obs["text"] == "Get the balance to 30."
    names = [t["function"]["name"] for t in info["tools"]]
    assert names == ["deposit", "fetch_rate", "explode", "hang", "hang_async", "submit"]
    obs, reward, terminated, truncated, info = env.step(
        call("deposit", amount=10)
        + call("fetch_rate", currency="EUR")
        + call("deposit", amount=20)
        + call("fetch_rate", currency="USD")
    )
    assert obs["text"] == "[deposit] balance 10\n\n[fetch_rate] 0.5\n\n[deposit] balance 30\n\n[fetch_rate] 2.0"
    assert (reward, terminated, truncated, info["error"]) == (0.0, False, False, None)
    obs, reward, terminated, _, info = env.step(call("submit", answer="done"))
    assert (reward, terminated, info["success"]) == (1.0, True, True)
    assert env.transcript[-1] == {"tool": "submit", "arguments": {"answer": "done"}, "result": "Submitted."}
    env.close()


def test_text_reply_is_the_answer_and_can_be_disallowed():
    env = make_env()
    env.reset(options={"task_id": "reach-5"})
    _, reward, terminated, _, info = env.step("I give up.")
    assert (reward, terminated, info["success"]) == (0.0, True, False)
    assert env.transcript == [{"tool": "submit", "arguments": {"answer": "I give up."}, "result": ""}]
    strict = make_env(allow_text_replies=False)
    strict.reset(options={"task_id": "reach-5"})
    obs, _, terminated, _, info = strict.step("I give up.")
    assert not terminated and info["error"] and "Available tools" in obs["text"]
    env.close(), strict.close()


def test_tool_errors_and_timeouts_are_results_and_the_episode_goes_on():
    env = make_env()
    env.reset(options={"task_id": "reach-5"})
    obs, _, terminated, truncated, info = env.step(call("explode"))
    assert obs["text"] == "Error: KeyError: 'vault'" and info["error"] == obs["text"]
    assert not (terminated or truncated) and "env_error" not in info
    started = time.monotonic()
    obs, *_ = env.step(call("hang"))
    assert obs["text"] == "Error: tool timed out after 0.3s"
    obs, *_ = env.step(call("hang_async"))
    assert obs["text"] == "Error: tool timed out after 0.2s"  # the tool's own timeout wins
    assert time.monotonic() - started < 2
    time.sleep(0.3)  # the cut-off calls never reach their state change
    assert env.state["balance"] == 0
    obs, _, terminated, _, info = env.step(call("deposit", amount=5) + call("submit"))
    assert obs["text"] == "[deposit] balance 5\n\n[submit] Submitted." and terminated and info["success"]
    env.close()


PREFIX = [call("deposit", amount=3), call("fetch_rate", currency="EUR") + call("explode"), call("deposit", amount=4)]
NEXT = [call("fetch_rate", currency="USD"), call("deposit", amount=23) + call("submit", answer="30")]


def play(env, replies):
    return [env.step(reply)[:4] for reply in replies]


def test_python_state_fork_then_continue_equals_replay():
    original, replayed = make_env(), make_env()
    for env in (original, replayed):
        env.reset(options={"task_id": "reach-30"})
        play(env, PREFIX)
    with original.snapshot() as snap:
        fork, restored_fork = original.fork(), original.fork(snap)
        assert play(fork, NEXT) == play(replayed, NEXT) == play(restored_fork, NEXT)
        assert fork.state == replayed.state == restored_fork.state and fork.state is not restored_fork.state
        assert fork.transcript == replayed.transcript
        # The original did not move, and a restore of the same snapshot can be repeated.
        assert original.state == {"balance": 7, "log": [3, 4]}
        play(original, [call("deposit", amount=1)])
        original.restore(snap)
        assert original.state == {"balance": 7, "log": [3, 4]} and original.turn == 3
    for env in (original, replayed, fork, restored_fork):
        env.close()


# ------------------------------------------------------------------ an env over SQLite state
class Todo:
    """Tools as the methods of one object; the database is the state."""

    def add(self, title: str, state: SQLiteState) -> int:
        """Add a todo; returns its id."""
        return state.execute("INSERT INTO todos(title) VALUES (?)", (title,)).lastrowid

    def finish(self, todo_id: int, state: SQLiteState) -> str:
        """Mark a todo as done."""
        if state.execute("UPDATE todos SET done = 1 WHERE id = ?", (todo_id,)).rowcount == 0:
            raise LookupError(f"no todo {todo_id}")
        return "done"

    def listing(self, state: SQLiteState) -> list:
        """Every todo."""
        return state.query("SELECT id, title, done FROM todos ORDER BY id")


def make_todo_env(**kwargs):
    return ToolEnv(
        Todo(),
        {"two": "Add two todos and finish the first."},
        variant="todo",
        state_factory=lambda task: SQLiteState(
            script="CREATE TABLE todos(id INTEGER PRIMARY KEY, title TEXT, done INT DEFAULT 0)"
        ),
        check=lambda task, db, transcript: (
            (1.0, True) if db.query("SELECT done FROM todos ORDER BY id") == [(1,), (0,)] else (0.0, False)
        ),
        **kwargs,
    )


def test_sqlite_fork_then_continue_equals_replay():
    prefix = [call("add", title="milk") + call("finish", todo_id=9), call("add", title="eggs")]
    after = [call("finish", todo_id=1) + call("listing"), call("submit")]
    original, replayed = make_todo_env(), make_todo_env()
    for env in (original, replayed):
        env.reset()
        play(env, prefix)
    assert original.transcript[1]["result"] == "Error: LookupError: no todo 9"
    fork = original.fork()
    assert fork.kind == original.kind and fork.kind.endswith(":todo")
    results = play(fork, after)
    assert results == play(replayed, after)
    assert results[-1][1:3] == (1.0, True)
    assert json.loads(fork.transcript[-2]["result"]) == [[1, "milk", 1], [2, "eggs", 0]]
    assert original.state.query("SELECT done FROM todos") == [(0,), (0,)]  # the branch is independent
    with pytest.raises(Exception, match="cannot restore"):
        make_env().restore(original.snapshot())  # another ToolEnv configuration is another kind
    for env in (original, replayed, fork):
        env.close()


def test_sqlite_state_inside_a_python_object_and_from_a_file(tmp_path):
    path = tmp_path / "seed.db"
    SQLiteState(str(path), script="CREATE TABLE t(x INT); INSERT INTO t VALUES (1)").close()

    def count(state: dict) -> int:
        """How many rows."""
        return state["db"].query("SELECT count(*) FROM t")[0][0]

    env = ToolEnv([count], {"t": "count"}, state_factory=lambda task: {"db": SQLiteState(str(path)), "notes": []})
    env.reset()
    fork = env.fork()
    fork.state["db"].execute("INSERT INTO t VALUES (2)")
    assert fork.step(call("count"))[0]["text"] == "2"
    assert env.step(call("count"))[0]["text"] == "1"  # neither the original nor the file changed
    env.close(), fork.close()


def test_gymnasium_check_env():
    check_env(make_todo_env(), skip_render_check=False, skip_close_check=True)


def test_example_script_runs():
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "tool_env.py")], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    assert "main success: True | branch success: False" in result.stdout
    assert sum(1 for line in open(ROOT / "examples" / "tool_env.py") if line.strip()) < 40


def test_state_that_cannot_be_pickled_is_deep_copied():
    def bump(state: dict) -> str:
        """Count up."""
        state["n"] += 1
        return state["format"](state["n"])

    env = ToolEnv([bump], {"t": "count"}, state_factory=lambda task: {"n": 0, "format": lambda n: f"n={n}"})
    env.reset()
    env.step(call("bump"))
    fork = env.fork()
    assert fork.step(call("bump"))[0]["text"] == env.step(call("bump"))[0]["text"] == "n=2"
    assert fork.state["format"] is env.state["format"]  # functions are shared, as deepcopy does
    env.close(), fork.close()
