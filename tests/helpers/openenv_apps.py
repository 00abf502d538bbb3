"""Small envs written with OpenEnv's own base classes and served by OpenEnv's ``create_app``, for the OpenEnv client tests.

``python -m tests.helpers.openenv_apps <app> <port>`` serves one of :data:`APPS` with uvicorn
on 127.0.0.1; the tests start it as a subprocess.

* ``counter`` — text actions (one ``message`` field): "add N" adds N (1-10), "submit" ends the
  episode with reward 1 iff the total hit the target. The target is drawn from the reset's seed
  (or from an unseeded RNG with ``unseeded=True``, a server that cannot be replayed), or set by
  the task id ``reach-<N>``.
* ``moves`` — structured actions (``op`` and ``n`` fields): the same game, offered to the model as a tool.

The counter's "sleep" message makes its step hang for a minute (a hung server).
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any, Literal

import uvicorn
from openenv.core.env_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

__all__ = ["APPS", "CounterEnvironment", "MovesEnvironment"]


class CounterAction(Action):
    message: str = Field(description="'add N' (N from 1 to 10) or 'submit'")


class MoveAction(Action):
    """Add to the counter, or submit the total."""

    op: Literal["add", "submit"] = Field(description="what to do")
    n: int = Field(default=0, ge=0, le=10, description="how much to add (for op='add')")


class CounterObservation(Observation):
    text: str = ""


class CounterState(State):
    target: int = 0
    total: int = 0


class CounterEnvironment(Environment):
    """Reach the target by adding; submit to end (reward 1 iff the total is the target)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self._state = CounterState()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> CounterObservation:
        task_id = kwargs.get("task_id")
        if isinstance(task_id, str) and task_id.startswith("reach-"):
            target = int(task_id.removeprefix("reach-"))
        else:
            rng = random.Random() if kwargs.get("unseeded") else random.Random(seed)
            target = rng.randint(5, 40)
        self._state = CounterState(episode_id=episode_id, target=target)
        return CounterObservation(text=f"Reach {target}. Counter: 0")

    def _apply(self, op: str, n: int) -> CounterObservation:
        state = self._state
        state.step_count += 1
        if op == "submit":
            hit = state.total == state.target
            return CounterObservation(
                text=f"Submitted {state.total}: {'success' if hit else 'failure'}",
                done=True,
                reward=1.0 if hit else 0.0,
                metadata={"success": hit},
            )
        if not 1 <= n <= 10:
            return CounterObservation(text=f"n must be 1 to 10, got {n}. Counter: {state.total}", reward=0.0)
        state.total += n
        return CounterObservation(text=f"Counter: {state.total}", reward=0.0)

    def step(self, action: CounterAction, timeout_s: float | None = None, **kwargs: Any) -> CounterObservation:
        words = action.message.split()
        if words[:1] == ["sleep"]:
            time.sleep(60)
        if words[:1] == ["add"] and len(words) == 2 and words[1].isdigit():
            return self._apply("add", int(words[1]))
        if words == ["submit"]:
            return self._apply("submit", 0)
        return CounterObservation(text=f"Unknown command {action.message!r}. Counter: {self._state.total}")

    @property
    def state(self) -> CounterState:
        return self._state


class MovesEnvironment(CounterEnvironment):
    """The counter game with structured actions."""

    def step(self, action: MoveAction, timeout_s: float | None = None, **kwargs: Any) -> CounterObservation:  # type: ignore[override]
        return self._apply(action.op, action.n)


#: Sessions each server holds at once (OpenEnv's default is one): enough for forks and a runner's envs.
MAX_SESSIONS = 16

APPS = {
    "counter": lambda: create_app(
        CounterEnvironment, CounterAction, CounterObservation, max_concurrent_envs=MAX_SESSIONS
    ),
    "moves": lambda: create_app(MovesEnvironment, MoveAction, CounterObservation, max_concurrent_envs=MAX_SESSIONS),
}


if __name__ == "__main__":
    app_name, port = sys.argv[1], int(sys.argv[2])
    uvicorn.run(APPS[app_name](), host="127.0.0.1", port=port, log_level="warning")
