"""A pure-Python AgentEnv used to test the contract itself (no sandbox): reach a target number by adding; ScreenCounterEnv adds a screen."""

from __future__ import annotations

import copy

import numpy as np

from agentgym.actions import ToolCall, ToolSpec
from agentgym.core import AgentEnv, Outcome

TARGETS = {"reach-7": 7, "reach-12": 12, "reach-30": 30}


class CounterEnv(AgentEnv):
    """Start at 0; ``add(n)`` adds n (1 ≤ n ≤ 10), ``submit()`` ends the episode: success iff the total hits the target."""

    def __init__(self, max_turns: int = 20, release_log: list | None = None, **kwargs):
        super().__init__(max_turns=max_turns, **kwargs)
        self.total = 0
        self.history: list[int] = []
        self.release_log = release_log if release_log is not None else []

    def task_ids(self):
        return list(TARGETS)

    def tools(self):
        return [
            ToolSpec(
                "add",
                "Add n to the counter.",
                {
                    "type": "object",
                    "properties": {"n": {"type": "integer", "description": "1 to 10"}},
                    "required": ["n"],
                },
            ),
            ToolSpec("submit", "Finish the episode."),
        ]

    def _setup(self, task_id):
        self.total, self.history = 0, []
        return f"Reach {TARGETS[task_id]} by calling add(n). Counter: 0"

    def _call_tool(self, call: ToolCall) -> Outcome:
        if call.name == "add":
            n = call.arguments["n"]
            if not 1 <= n <= 10:
                return Outcome(f"Error: n must be between 1 and 10, got {n}", error="n out of range")
            self.total += n
            self.history.append(n)
            return Outcome(f"Counter: {self.total}")
        success = self.total == TARGETS[self.task_id]
        return Outcome(
            f"Submitted {self.total}: {'success' if success else 'failure'}",
            reward=float(success),
            terminated=True,
            success=success,
        )

    # Backend hooks rather than branch_attributes: the release callback is what the contract's tests watch.
    def _backend_capture(self):
        token = len(self.release_log)
        return (self.total, copy.copy(self.history)), lambda: self.release_log.append(token)

    def _backend_load(self, payload):
        self.total, history = payload
        self.history = list(history)


SHAPE = (400, 1000)  # an env screen larger than max_side 768: sent as 768 × 307 (400 × 768/1000 = 307.2)


def frame(total: int) -> np.ndarray:
    """The screen showing counter ``total``: incompressible pixels, a different picture for every total."""
    return np.random.default_rng(total).integers(0, 256, (*SHAPE, 3), dtype=np.uint8)


class ScreenCounterEnv(CounterEnv):
    """CounterEnv with a screen: every observation carries an image of the counter."""

    def __init__(self, **kwargs):
        super().__init__(image_shape=SHAPE, **kwargs)

    def _setup(self, task_id):
        return {"text": super()._setup(task_id), "image": frame(0)}

    def _call_tool(self, call):
        outcome = super()._call_tool(call)
        return Outcome(
            outcome.text, outcome.reward, outcome.terminated, outcome.success, outcome.error, frame(self.total)
        )
