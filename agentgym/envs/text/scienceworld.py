"""ScienceWorld as an agentgym env: the ``scienceworld`` simulator (a JVM) played by its own commands, scored by its own 0–100 score.

``ScienceWorldEnv`` (registered as ``agentgym/text.scienceworld-v0``) runs the 30 task types of
the ``scienceworld`` package. A task is one variation of one task type, ``<split>/<task>/<n>``
(``test/boil/27``), with ScienceWorld's own train/dev/test variation split as its category; the
split of every variation is read from the engine (:data:`VARIATIONS`, a file made by
:func:`read_variations`, checked against the engine by the tests) so that listing tasks starts
no JVM.

* **Observation**: the first is the task description and the room (``look around``); then
  the engine's answer to each command. ``info["valid_actions"]`` holds ScienceWorld's valid
  action-object combinations (thousands of them; ``show_valid_actions=True`` appends them).
* **Actions**: ScienceWorld's commands as text (``open door to kitchen``) or ``act(command)``;
  a command the engine does not parse gets its own answer (``No known action matches that
  input.``).
* **Reward**: each step's change of ScienceWorld's score over 100, so an episode's return is
  the final score / 100; ``info["grade"]["score"]`` is the score itself. The episode ends when
  the engine says the task is completed or failed (a negative score), and is truncated past
  ``step_limit`` moves, as the package's own ``envStepLimit``. Success is a score of 100.
* **Branching**: by replay (:class:`~agentgym.envs.text.jvm.JVMGameEnv`). The engine cannot save or
  restore its state (its Python API has no such call), so a snapshot is the task and the commands
  played since reset, and a fork loads the task into a warm engine and replays them; ScienceWorld
  is deterministic given the task, the variation and the commands, which the fork-equals-replay
  test checks.
* **Engines**: JVMs from one process-wide :class:`~agentgym.sandbox.engine_pool.EnginePool`, taken
  at the first reset and given back at close; a reset loads the task into the env's engine. A
  JVM that dies is an ``env_error`` on that step; the next reset takes a new one.
* **Reference solution**: ScienceWorld's gold action sequence of the variation
  (``load(..., generateGoldPath=True)``), made in a pooled engine when asked for.

A Java runtime must be installed (Debian: ``default-jre-headless``); without one, the first
reset says so in one line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from agentgym.core import Verdict, select_tasks
from agentgym.envs.text.env import Played, parse_task_id
from agentgym.envs.text.jvm import JVMGameEnv, jvm_pool, require_java
from agentgym.extras import requires

with requires("text"):
    import scienceworld

__all__ = ["ScienceWorldEnv", "VARIATIONS", "engine_pool", "gold_path", "read_variations"]

VARIATIONS_FILE = Path(__file__).with_name("scienceworld_variations.json")
#: Task type → split → its variation indices, as the engine lists them (``get_variations_train`` ...).
VARIATIONS: dict[str, dict[str, list[int]]] = json.loads(VARIATIONS_FILE.read_text())
SPLITS = ("train", "dev", "test")
DEFAULT_VARIATIONS_PER_SPLIT = {"train": 10, "dev": 3, "test": 3}
#: A JVM running ScienceWorld, resident (measured: ~400 MB).
JVM_MB = 400


def _start() -> Any:
    require_java("ScienceWorld")
    return scienceworld.ScienceWorldEnv("")


#: The process-wide pool of ScienceWorld JVMs (made at its first call).
engine_pool = jvm_pool(_start, JVM_MB)


def read_variations(engine: Any) -> dict[str, dict[str, list[int]]]:
    """Every task type's variations per split, read from a running engine (what :data:`VARIATIONS` holds)."""
    variations = {}
    for name in engine.get_task_names():
        engine.load(name, 0, "")
        variations[name] = {
            "train": list(engine.get_variations_train()),
            "dev": list(engine.get_variations_dev()),
            "test": list(engine.get_variations_test()),
        }
    return variations


def gold_path(task: str, variation: int, simplifications: str = "") -> list[str]:
    """ScienceWorld's gold action sequence of one variation, made in a pooled engine."""
    with engine_pool().borrowed() as engine:
        engine.load(task, variation, simplifications, generateGoldPath=True)
        engine.reset()
        return list(engine.get_gold_action_sequence())


class ScienceWorldEnv(JVMGameEnv):
    """ScienceWorld's task variations, scored by the simulator's own score (see the module docstring).

    Args:
        task_types: the task types listed (ScienceWorld's names, e.g. ``"boil"``); default all 30.
        variations_per_split: how many variations of each split are listed per task type (the
            first ones of the split; ``None`` for a split: all of it).
        tasks: task ids or a pattern over the listed ones (``"test/*"``).
        simplifications: ScienceWorld's simplification string (``"easy"``, ``"teleportAction"``, ...).
        step_limit: moves before the episode is truncated (ScienceWorld's ``envStepLimit``).
        show_valid_actions: append the valid action-object combinations to every observation.
        max_turns: replies before the episode is truncated (default: ``step_limit``).
    """

    benchmark = "ScienceWorld"
    engine_pool = staticmethod(engine_pool)
    task_fields = ("task", "variation")

    def __init__(
        self,
        task_types: Sequence[str] | None = None,
        variations_per_split: Mapping[str, int | None] = DEFAULT_VARIATIONS_PER_SPLIT,
        *,
        tasks: str | Sequence[str] | None = None,
        simplifications: str = "",
        step_limit: int = 100,
        show_valid_actions: bool = False,
        max_turns: int | None = None,
        **kwargs: Any,
    ):
        super().__init__(show_valid_actions=show_valid_actions, max_turns=max_turns or step_limit, **kwargs)
        types = list(task_types or VARIATIONS)
        unknown = sorted(set(types) - set(VARIATIONS)) + sorted(set(variations_per_split) - set(SPLITS))
        if unknown:
            raise ValueError(f"unknown ScienceWorld task types or splits: {unknown}")
        listed = [
            f"{split}/{task}/{variation}"
            for split, count in variations_per_split.items()
            for task in types
            for variation in VARIATIONS[task][split][:count]
        ]
        self._task_ids = select_tasks(listed, tasks)
        self.simplifications = simplifications
        self.step_limit = step_limit
        self._score = 0
        self._valid: list[str] = []

    # ------------------------------------------------------------------ family hooks
    def _setup(self, task_id: str) -> str:
        _, task, variation = parse_task_id(task_id)
        observation, info = self._load_task(task, variation)
        return f"{info['taskDesc']}\n\n{observation}"

    def _gold_path(self, task_id: str) -> partial[list[str]]:
        _, task, variation = parse_task_id(task_id)
        return partial(gold_path, task, variation, self.simplifications)

    def _load_task(self, task: str, variation: int) -> tuple[str, dict]:
        self._engine().envStepLimit = self.step_limit
        observation, info = self._engine_call(self._reset_engine, task, variation)
        self.commands, self._score, self._valid = [], 0, list(info["valid"])
        return observation, info

    def _reset_engine(self, task: str, variation: int) -> tuple[str, dict]:
        self.engine.load(task, variation, self.simplifications)
        return self.engine.reset()

    def _play(self, command: str) -> Played:
        observation, reward, done, info = self._engine_call(self.engine.step, command)
        self.commands.append(command)
        self._score, self._valid = int(info["score"]), list(info["valid"])
        # The package ends an episode for three reasons: the task completed, it failed (a negative score), or
        # more moves than envStepLimit; the last is a time limit (truncation), not an ending.
        ended = done and (self._score < 0 or bool(self._engine_call(self.engine.server.getCompleted)))
        return Played(observation, ended=ended, timed_out=done and not ended, reward=reward / 100)

    def _grade(self, answer: str | None) -> Verdict:
        success = self._score >= 100
        details = {"score": self._score, "moves": len(self.commands)}
        return Verdict(self._score / 100, success, details=details)

    def valid_actions(self) -> list[str]:
        return self._valid
