"""TextWorldExpress as an agentgym env: the ``textworld-express`` simulator (a JVM) played by its own commands, scored by its own 0–1 score.

``TextWorldExpressEnv`` (registered as ``agentgym/text.textworld-express-v0``) runs the eight
games of the ``textworld-express`` package: cookingworld, twc, coin, mapreader, arithmetic,
sorting, simonsays and peckingorder. A task is one generated game, ``<fold>/<game>/<seed>``
(``test/coin/20003``), with the package's own train/dev/test folds as its category: each fold
has its own seeds (train 0–999, dev 10000–10999, test 20000–20999, as the engine lists them
with ``getValidSeeds*``; :data:`FOLD_SEEDS`, checked against the engine by the tests) and the fold
also selects the objects a game may hold.

* **Observation**: the first is the task description and the room; then the engine's answer to
  each command. ``info["valid_actions"]`` holds the engine's valid actions
  (``show_valid_actions=True`` appends them).
* **Actions**: the game's commands as text (``open door to north``, ``take coin``) or
  ``act(command)``; a command the engine does not parse gets its own answer (``Unknown action:
  I'm not sure what you mean.``); ``help`` repeats the task description, as in the package.
* **Reward**: the package's own: each step's change of the game's score (0–1), so an episode's
  return is the final score; ``info["grade"]["score"]`` is the score itself. The episode ends
  (``terminated``) when the engine reports the task succeeded or failed or the score reaches 1,
  and is truncated past ``step_limit`` moves, as the package's own ``envStepLimit``. Success is
  the engine's ``tasksuccess``.
* **Branching**: by replay in a warm JVM (:class:`~agentgym.envs.text.jvm.JVMGameEnv`): the
  engine cannot save or restore a game (the package's own ``clone`` replays too).
* **Engines**: JVMs from one process-wide :class:`~agentgym.sandbox.engine_pool.EnginePool`; a
  reset generates the task's game in the env's engine.
* **Reference solution**: the engine's gold action sequence of the game
  (``reset(..., generateGoldPath=True)``), made in a pooled engine when asked for.

A Java runtime must be installed (Debian: ``default-jre-headless``); without one, the first
reset says so in one line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from agentgym.core import Verdict, select_tasks
from agentgym.envs.text.env import Played, parse_task_id
from agentgym.envs.text.jvm import JVMGameEnv, jvm_pool, require_java
from agentgym.extras import requires

with requires("text"):
    from textworld_express import TextWorldExpressEnv as PackageEnv

__all__ = ["FOLD_SEEDS", "GAMES", "TextWorldExpressEnv", "engine_pool", "gold_path", "parse_task_id"]

#: The package's games, as ``getGameNames()`` lists them.
GAMES = ("cookingworld", "twc", "coin", "mapreader", "arithmetic", "sorting", "simonsays", "peckingorder")
#: Fold → its seeds, as the engine lists them (``getValidSeedsTrain()`` ...), the same for every game.
FOLD_SEEDS: dict[str, range] = {"train": range(0, 1000), "dev": range(10000, 11000), "test": range(20000, 21000)}
DEFAULT_SEEDS_PER_FOLD = {"train": 10, "dev": 3, "test": 3}
#: A JVM running TextWorldExpress, resident (measured: ~300 MB after 120 games).
JVM_MB = 300


def _start() -> Any:
    require_java("TextWorldExpress")
    return PackageEnv()


#: The process-wide pool of TextWorldExpress JVMs (made at its first call).
engine_pool = jvm_pool(_start, JVM_MB)


def gold_path(fold: str, game: str, seed: int, game_params: str = "") -> list[str]:
    """The engine's gold action sequence of one game, made in a pooled engine."""
    with engine_pool().borrowed() as engine:
        engine.reset(seed=seed, gameFold=fold, gameName=game, gameParams=game_params, generateGoldPath=True)
        return engine.getGoldActionSequence()


class TextWorldExpressEnv(JVMGameEnv):
    """TextWorldExpress's games, scored by the simulator's own score (see the module docstring).

    Args:
        games: the games listed (the package's names); default all eight.
        seeds_per_fold: how many games of each fold are listed per game (the fold's first seeds).
        tasks: task ids or a pattern over the listed ones (``"test/*"``).
        game_params: per game, the package's generation parameters (``"numLocations=5,includeDoors=0"``);
            a game not named here gets the package's defaults.
        step_limit: moves before the episode is truncated (the package's ``envStepLimit``).
        show_valid_actions: append the valid actions to every observation.
        max_turns: replies before the episode is truncated (default: ``step_limit``).
    """

    benchmark = "TextWorldExpress"
    engine_pool = staticmethod(engine_pool)
    task_fields = ("game", "seed")

    def __init__(
        self,
        games: Sequence[str] | None = None,
        seeds_per_fold: Mapping[str, int] = DEFAULT_SEEDS_PER_FOLD,
        *,
        tasks: str | Sequence[str] | None = None,
        game_params: Mapping[str, str] | None = None,
        step_limit: int = 100,
        show_valid_actions: bool = False,
        max_turns: int | None = None,
        **kwargs: Any,
    ):
        super().__init__(show_valid_actions=show_valid_actions, max_turns=max_turns or step_limit, **kwargs)
        games = list(games or GAMES)
        unknown = sorted({*games, *(game_params or {})} - set(GAMES)) + sorted(set(seeds_per_fold) - set(FOLD_SEEDS))
        if unknown:
            raise ValueError(f"unknown TextWorldExpress games or folds: {unknown}")
        listed = [
            f"{fold}/{game}/{seed}"
            for fold, count in seeds_per_fold.items()
            for game in games
            for seed in FOLD_SEEDS[fold][:count]
        ]
        self._task_ids = select_tasks(listed, tasks)
        self.game_params = dict(game_params or {})
        self.step_limit = step_limit
        self._last: dict[str, Any] = {}

    # ------------------------------------------------------------------ family hooks
    def _setup(self, task_id: str) -> str:
        fold, game, seed = parse_task_id(task_id)
        engine = self._engine()
        engine.envStepLimit = self.step_limit
        params = self.game_params.get(game, "")
        observation, info = self._engine_call(engine.reset, seed=seed, gameFold=fold, gameName=game, gameParams=params)
        self.commands, self._last = [], info
        return f"{info['taskDescription']}\n\n{observation}"

    def _gold_path(self, task_id: str) -> partial[list[str]]:
        fold, game, seed = parse_task_id(task_id)
        return partial(gold_path, fold, game, seed, self.game_params.get(game, ""))

    def _play(self, command: str) -> Played:
        observation, reward, done, info = self._engine_call(self.engine.step, command)
        self.commands.append(command)
        self._last = info
        # The package ends a game when it succeeded, failed or scored 1, or after more moves than envStepLimit;
        # the last is a time limit (truncation), not an ending.
        ended = bool(info["tasksuccess"] or info["taskfailure"] or info["score"] >= 1.0)
        return Played(observation, ended=ended, timed_out=done and not ended, reward=float(reward))

    def _grade(self, answer: str | None) -> Verdict:
        score = float(self._last["score"])
        details = {"score": score, "moves": len(self.commands), "failed": bool(self._last["taskfailure"])}
        return Verdict(score, bool(self._last["tasksuccess"]), details=details)

    def valid_actions(self) -> list[str]:
        return list(self._last.get("validActions", []))
