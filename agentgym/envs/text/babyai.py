"""BabyAI played as text: minigrid's BabyAI levels, described in words as BALROG's text wrapper does, scored by each level's own success.

``BabyAIEnv`` (registered as ``agentgym/text.babyai-v0``) runs the BabyAI levels of the
``minigrid`` package. A task is one level at one seed, ``<split>/<Level>/<n>``
(``test/GoToLocal/3``): the seed is the split's base seed plus ``n`` (:data:`SPLIT_SEEDS`), so
train, dev and test never share a layout. BabyAI has no official splits; these are this env's,
the split is each task's category, and ``agentgym eval --suite babyai --tasks 'test/*'`` runs one.

* **Observation**: the mission, then what the agent sees in its 7×7 view, in words (``a red
  ball 1 step left and 2 steps forward``, the nearest wall straight ahead, left and right, doors
  with their state), and what it carries (:func:`describe`). The first observation also lists
  the actions.
* **Actions**: BabyAI's action set in BALROG's words: ``turn left``, ``turn right``,
  ``go forward``, ``pick up``, ``drop``, ``toggle``, ``done`` (plain text or ``act(command)``).
  minigrid has no text parser, so anything else is answered with the list of actions
  (``info["error"]`` set) and does not reach the level: it costs a turn, not a level step.
* **Reward**: the level's own, on the step that ends it: minigrid's ``1 - 0.9 * steps /
  max_steps`` when the mission is done, 0 when it fails; success is a positive reward. The
  level's step limit truncates the episode, as in minigrid.
* **Branching**: exact. A snapshot is a pickled copy of the whole minigrid env (grid, agent,
  mission verifier, RNG), so a fork goes on exactly as a replay from reset would.
* **Reference solution**: minigrid's BabyAI bot (:class:`minigrid.utils.baby_ai_bot.BabyAIBot`)
  played on the task; :meth:`BabyAIEnv.demonstration_replies` lets it err at a given rate and
  replan, for warm starts. The default levels are ones the bot solves (minigrid lists those it
  does not: the ``PutNext...Carrying`` levels and ``KeyInBox``).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import gymnasium

from agentgym.core import Verdict, select_tasks
from agentgym.envs.state import StateCopy
from agentgym.envs.text.env import Played, TextGameEnv
from agentgym.extras import requires
from agentgym.task import Task

with requires("text"):
    import minigrid  # noqa: F401  (registers the BabyAI levels with gymnasium)
    from minigrid.core.actions import Actions
    from minigrid.core.constants import IDX_TO_COLOR, IDX_TO_OBJECT
    from minigrid.utils.baby_ai_bot import BabyAIBot

__all__ = ["ACTIONS", "BabyAIEnv", "DEFAULT_LEVELS", "SPLIT_SEEDS", "bot_actions", "describe", "make_level"]

#: BabyAI's actions in BALROG's words, in minigrid's order.
ACTIONS: dict[str, int] = {
    "turn left": Actions.left,
    "turn right": Actions.right,
    "go forward": Actions.forward,
    "pick up": Actions.pickup,
    "drop": Actions.drop,
    "toggle": Actions.toggle,
    "done": Actions.done,
}
ACTION_NAMES = {index: name for name, index in ACTIONS.items()}

#: Levels from one-room navigation to the boss level, all solved by the bot.
DEFAULT_LEVELS = (
    "GoToRedBallGrey",
    "GoToLocal",
    "PickupLoc",
    "PutNextLocal",
    "OpenDoor",
    "Unlock",
    "GoToSeq",
    "SynthLoc",
    "BossLevel",
)
#: Task ``<split>/<Level>/<n>`` plays the level at seed ``SPLIT_SEEDS[split] + n``; the bases are far apart so splits never overlap.
SPLIT_SEEDS = {"train": 0, "dev": 1_000_000, "test": 2_000_000}
DEFAULT_TASKS_PER_SPLIT = {"train": 50, "dev": 10, "test": 10}


def make_level(level: str, seed: int) -> Any:
    """The minigrid env of a BabyAI level (``GoToLocal``) reset at ``seed``: the raw env, as minigrid makes it."""
    env = gymnasium.make(f"BabyAI-{level}-v0").unwrapped
    env.reset(seed=seed)
    return env


def describe(level_env: Any, *, with_actions: bool = False) -> str:
    """What the agent sees, in words: the mission, the objects in view relative to the agent, the nearest walls, what it carries."""
    image = level_env.gen_obs()["image"]  # (x, y) in the agent's view; the agent at (3, 6) looking to y = 0
    size = image.shape[0]
    ahead, middle = size - 1, size // 2
    things: list[tuple[int, int, str]] = []  # (steps ahead, steps aside, text): sorted nearest first
    walls: dict[str, int] = {}
    for x in range(size):
        for y in range(size):
            kind, color, state = (int(value) for value in image[x, y])
            name = IDX_TO_OBJECT[kind]
            forward, right = ahead - y, x - middle
            if name in ("unseen", "empty", "floor", "agent") or (forward, right) == (0, 0):
                continue
            if name == "wall":
                # Only walls in a straight line: the room's shape, not every wall tile in view.
                for direction, along, across in (
                    ("forward", forward, right),
                    ("left", -right, forward),
                    ("right", right, forward),
                ):
                    if across == 0 and along > 0 and along < walls.get(direction, size + 1):
                        walls[direction] = along
                continue
            label = f"{IDX_TO_COLOR[color]} {name}"
            if name == "door":
                label = f"{('open', 'closed', 'locked')[state]} {label}"
            things.append((forward, abs(right), f"a {label} {_where(forward, right)}"))
    lines = [f"Mission: {level_env.mission}"]
    seen = [text for _, _, text in sorted(things)]
    seen += [f"a wall {_steps(distance)} {direction}" for direction, distance in sorted(walls.items())]
    lines.append("You see: " + ("; ".join(seen) if seen else "nothing but the floor") + ".")
    carrying = level_env.carrying
    lines.append(f"You carry a {carrying.color} {carrying.type}." if carrying else "You carry nothing.")
    if with_actions:
        lines.append("Actions: " + ", ".join(ACTIONS) + ". Reply with one action per turn.")
    return "\n".join(lines)


def _steps(count: int) -> str:
    return f"{count} step" if count == 1 else f"{count} steps"


def _where(forward: int, right: int) -> str:
    parts = []
    if right:
        parts.append(f"{_steps(abs(right))} {'right' if right > 0 else 'left'}")
    if forward:
        parts.append(f"{_steps(forward)} forward")
    return " and ".join(parts)


def bot_actions(level: str, seed: int, mistake_rate: float = 0.0, rng: random.Random | None = None) -> list[str]:
    """The BabyAI bot's actions on the level at ``seed``, until the level ends.

    With ``mistake_rate`` > 0 a random move (turn or step) replaces the bot's action that often
    (drawn from ``rng``) and the bot replans from where it is, as minigrid's bot is meant to be
    used for imitation with noise.
    """
    if mistake_rate and rng is None:
        raise ValueError("a mistaken demonstration needs an rng to draw its mistakes from")
    env = make_level(level, seed)
    bot = BabyAIBot(env)
    actions: list[str] = []
    taken = None
    while True:
        action = bot.replan(taken)
        taken = None
        if mistake_rate and rng is not None and rng.random() < mistake_rate:
            action = taken = rng.choice((Actions.left, Actions.right, Actions.forward))
        actions.append(ACTION_NAMES[int(action)])
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            return actions


class BabyAIEnv(TextGameEnv):
    """BabyAI levels played as text, scored by the level's own success (see the module docstring).

    Args:
        levels: the BabyAI levels listed, by minigrid's names without ``BabyAI-`` and ``-v0``.
        tasks_per_split: how many seeds of each split are listed per level.
        tasks: task ids or a pattern over the listed ones (``"test/*"``).
        show_valid_actions: append the actions to every observation (the first lists them anyway).
        max_turns: replies before the episode is truncated; each level's own step limit
            (64 to 2,304 steps) usually ends it first.
    """

    def __init__(
        self,
        levels: Sequence[str] = DEFAULT_LEVELS,
        tasks_per_split: Mapping[str, int] = DEFAULT_TASKS_PER_SPLIT,
        *,
        tasks: str | Sequence[str] | None = None,
        show_valid_actions: bool = False,
        max_turns: int = 2400,
        **kwargs: Any,
    ):
        super().__init__(show_valid_actions=show_valid_actions, max_turns=max_turns, **kwargs)
        unknown = [level for level in levels if f"BabyAI-{level}-v0" not in gymnasium.registry]
        if unknown or set(tasks_per_split) - set(SPLIT_SEEDS):
            raise ValueError(
                f"unknown BabyAI levels {unknown} or splits {sorted(set(tasks_per_split) - set(SPLIT_SEEDS))}"
            )
        listed = [
            f"{split}/{level}/{n}" for split, count in tasks_per_split.items() for level in levels for n in range(count)
        ]
        self._task_ids = select_tasks(listed, tasks)
        self.level_env: Any = None
        self._ending_reward = 0.0

    def tasks(self) -> list[Task]:
        """Each listed task (category: its split), with the BabyAI bot's play as its reference solution."""
        tasks = []
        for task_id in self._task_ids:
            split, level, seed = parse_task_id(task_id)
            tasks.append(Task(task_id, "", split, {"level": level, "seed": seed}, self._gold_path(task_id)))
        return tasks

    def demonstration_replies(
        self, task_id: str, mistake_rate: float = 0.0, rng: random.Random | None = None
    ) -> list[str]:
        """The bot's play of a task, erring at ``mistake_rate`` and replanning (:func:`bot_actions`); SFT warm starts call this."""
        _, level, seed = parse_task_id(task_id)
        return bot_actions(level, seed, mistake_rate, rng)

    # ------------------------------------------------------------------ family hooks
    def _gold_path(self, task_id: str) -> partial[list[str]]:
        _, level, seed = parse_task_id(task_id)
        return partial(bot_actions, level, seed)

    def _setup(self, task_id: str) -> str:
        _, level, seed = parse_task_id(task_id)
        self.level_env = make_level(level, seed)
        return describe(self.level_env, with_actions=True)

    def _play(self, command: str) -> Played:
        action = ACTIONS.get(" ".join(command.lower().rstrip(".!").split()))
        if action is None:
            error = f"unknown action {command[:80]!r}"
            return Played(f"Unknown action {command[:80]!r}. The actions are: {', '.join(ACTIONS)}.", error=error)
        _, reward, terminated, truncated, _ = self.level_env.step(action)
        self._ending_reward = float(reward)
        return Played(describe(self.level_env), ended=terminated, timed_out=truncated, reward=float(reward))

    def _grade(self, answer: str | None) -> Verdict:
        # minigrid rewards exactly the successful endings (at least 0.1: the reward falls to 0.1 at the step limit).
        level, success = self.level_env, self._ending_reward > 0
        details = {
            "steps": int(level.step_count),
            "max_steps": int(level.max_steps),
            "minigrid_reward": self._ending_reward,
        }
        return Verdict(self._ending_reward, success, details=details)

    def valid_actions(self) -> list[str]:
        return list(ACTIONS)

    def _branch_state(self) -> StateCopy:
        return StateCopy(self.level_env)

    def _load_branch_state(self, state: StateCopy) -> None:
        self.level_env = state.restore()

    def _teardown(self) -> None:
        self.level_env = None


def parse_task_id(task_id: str) -> tuple[str, str, int]:
    """``(split, level, seed)`` of a task id ``<split>/<Level>/<n>``."""
    split, level, n = task_id.split("/")
    return split, level, SPLIT_SEEDS[split] + int(n)
