"""TextWorld as an agentgym env: games generated locally by seed with ``tw-make``, played on jericho through ``textworld``'s own environment, scored by the game's own score.

``TextWorldEnv`` (registered as ``agentgym/text.textworld-v0``) plays games of TextWorld's
built-in challenges, generated on this machine (the ``textworld`` wheel ships the Inform 7
compiler): :data:`GAME_KINDS` names each kind and its ``tw-make`` settings (a cooking game as in
the First TextWorld Problems, coin collector, treasure hunter, the simple game). A task is one
generated game, ``<split>/<kind>/<n>`` (``test/cooking/2``): the game of that kind generated with
seed split base + n (train 0–, dev 10000–, test 20000–); where the challenge has splits of its
own (tw-cooking's train/valid/test food and preparations, tw-simple's ``--test``) the task's
split selects them too. The split is the task's category.

* **Generation and cache**: a game is generated at its first use (a reset or its walkthrough),
  ~7–15 s each, into ``$AGENTGYM_CACHE/textworld`` (default ``~/.cache/agentgym/textworld``),
  keyed by the ``tw-make`` arguments; never at import or listing.
* **Observation**: the engine's text (the first is the game's introduction and first room),
  screen-free: without the z-machine's status line (``-= Room =-score/moves`` after the input
  prompt, the upper window) and without TextWorld's ASCII-art title, the same ~900 characters
  (631 of the tiny model's 812 tokens of a coin game's first observation) at the start of every
  game; :func:`screen_free`. ``info["valid_actions"]`` holds TextWorld's admissible commands
  (``show_valid_actions=True`` appends them).
* **Actions**: the game's commands as text (``go north``, ``take coin``) or ``act(command)``; a
  command the game does not parse gets its own answer.
* **Reward**: each step's change of the game's score over its maximum score, so an episode's
  return is score / max score; ``info["grade"]`` holds the score and the maximum. The episode
  ends when TextWorld says the game is won or lost; it is truncated after ``max_turns`` replies.
  Success is TextWorld's ``won``.
* **Branching**: exact. A snapshot is the z-machine's state (jericho's ``get_state``) and
  TextWorld's own state beside it: the fields of each of its wrappers over the z-machine (the
  quest tracker its admissible commands, ``won`` and ``lost`` come from, the last game state),
  deep-copied; the game itself (its rules, immutable) is shared. A fork loads the game into a
  pooled engine (unless it holds it already) and puts both back (``set_state``), with no
  command replayed. TextWorld's own exact copy, ``env.copy()``, loads the game twice (~0.3 s);
  this does not.
* **Engines**: ``textworld`` environments (in-process jericho z-machines) from one process-wide
  :class:`~agentgym.sandbox.engine_pool.EnginePool`; a reset loads the task's game into the env's
  engine unless it already holds it.
* **Reference solution**: the walkthrough TextWorld generates with the game.
"""

from __future__ import annotations

import copy
import hashlib
import os
import re
import shutil
import subprocess
import sys
import threading
import warnings
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from agentgym.core import Verdict, select_tasks
from agentgym.envs.text.env import Played, TextGameEnv, parse_task_id
from agentgym.extras import requires
from agentgym.sandbox.engine_pool import EnginePool

with requires("text"):
    import textworld
    from jericho.jericho import INPUT_BUFFER_SIZE, UnsupportedGameWarning

__all__ = [
    "GAME_KINDS",
    "SPLIT_SEEDS",
    "TextWorldEnv",
    "engine_pool",
    "game_file",
    "parse_task_id",
    "screen_free",
    "walkthrough",
]

#: Game kind → its ``tw-make`` challenge and settings; ``{split}`` in an argument becomes the task's split
#: as the challenge names it (:data:`CHALLENGE_SPLITS`), and an argument list under a split key is added for it.
GAME_KINDS: dict[str, dict[str, Any]] = {
    "cooking": {
        "args": ["tw-cooking", "--recipe", "2", "--take", "1", "--go", "6", "--open", "--cook", "--cut"],
        "split_args": {"train": ["--split", "train"], "dev": ["--split", "valid"], "test": ["--split", "test"]},
    },
    "coin": {"args": ["tw-coin_collector", "--level", "5"], "split_args": {}},
    "treasure": {"args": ["tw-treasure_hunter", "--level", "5"], "split_args": {}},
    "simple": {"args": ["tw-simple", "--rewards", "dense", "--goal", "detailed"], "split_args": {"test": ["--test"]}},
}
#: Split → the first seed of its games (a task's seed is this plus its number).
SPLIT_SEEDS = {"train": 0, "dev": 10000, "test": 20000}
DEFAULT_GAMES_PER_SPLIT = {"train": 10, "dev": 3, "test": 3}
#: What the engine reports besides the text: the scorer's fields, the admissible commands, the walkthrough.
INFOS = dict(admissible_commands=True, max_score=True, won=True, lost=True, score=True, extras=["walkthrough"])
#: A loaded game in its z-machine and TextWorld's tracker, resident (measured: ~3 MB; counted as 10 for larger games).
ENGINE_MB = 10
#: Seconds a game may take to generate before it is given up.
GENERATION_TIMEOUT_S = 300
#: Loading a game parses TextWorld's logic with a parser that is not thread-safe (concurrent loads fail with
#: parse errors), so envs on threads (eval's concurrency) load one at a time.
_LOAD_LOCK = threading.Lock()

#: The z-machine's file verbs: in jericho's frotz ``save`` writes ``game.qzl`` and ``script`` a transcript into the
#: host process's working directory, and ``restore`` reads one back (another episode's state, or a planted file).
#: The engine runs in this process, so these never reach it.
FILE_VERBS = frozenset({"save", "restore", "script", "transcript", "unscript", "noscript"})
#: TextWorld's own markup, which it reads back out of the game's text: event tags (``[going south - succeeded]``,
#: which move its quest tracker) and info tags (``<score>``). The game repeats what the agent says (``say``,
#: ``answer``...) inside an event tag, so a command holding these could forge them; no game command has one.
MARKUP = frozenset("[]<>")
#: The z-machine's status line, which jericho's interpreter prints after the input prompt ``>`` at the end of every
#: answer: the upper window (the room's name, then score/moves), screen rather than text.
STATUS_LINE = re.compile(r"\s*>[ \t]*-= [^\n]*=-[^\n]*\Z")
#: A line of TextWorld's ASCII-art title (or a blank line): no letters or digits, only the art's strokes.
TITLE_LINE = re.compile(r"[ _|$\\/<>]*")


def cache_dir() -> Path:
    """Where generated games are kept (``$AGENTGYM_CACHE/textworld``, default ``~/.cache/agentgym/textworld``)."""
    return Path(os.environ.get("AGENTGYM_CACHE") or Path.home() / ".cache" / "agentgym") / "textworld"


def make_args(split: str, kind: str, number: int) -> list[str]:
    """The ``tw-make`` arguments of one task's game."""
    spec = GAME_KINDS[kind]
    return [*spec["args"], *spec["split_args"].get(split, []), "--seed", str(SPLIT_SEEDS[split] + number)]


def game_file(split: str, kind: str, number: int) -> Path:
    """The task's game (a ``.z8`` with its ``.json`` beside it), generated with ``tw-make`` and cached on first use."""
    args = make_args(split, kind, number)
    key = hashlib.sha256(" ".join([textworld.__version__, *args]).encode()).hexdigest()[:16]
    folder = cache_dir() / f"{kind}-{split}-{number}-{key}"
    game = folder / "game.z8"
    if game.exists():
        return game
    staging = folder.with_name(f".{folder.name}-{os.getpid()}")
    staging.mkdir(parents=True, exist_ok=True)
    tw_make = Path(sys.executable).with_name("tw-make")
    command = [str(tw_make), *args, "--output", str(staging / "game.z8"), "--silent", "--force"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=GENERATION_TIMEOUT_S)
        if result.returncode != 0 or not (staging / "game.z8").exists():
            raise RuntimeError(f"tw-make failed for {kind} {split} {number}: {result.stderr.strip()[-500:]}")
        try:
            staging.rename(folder)
        except OSError:  # another process finished first: keep theirs
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return game


def walkthrough(split: str, kind: str, number: int) -> list[str]:
    """The walkthrough TextWorld generated with the task's game."""
    from textworld.generator import Game

    path = game_file(split, kind, number).with_suffix(".json")
    with _LOAD_LOCK:
        return list(Game.load(str(path)).metadata["walkthrough"])


def screen_free(text: str) -> str:
    """The game's answer without the z-machine's status line and, on the first, without TextWorld's ASCII-art title."""
    lines = STATUS_LINE.sub("", text).strip().split("\n")
    while lines and TITLE_LINE.fullmatch(lines[0]):
        lines.pop(0)
    return "\n".join(lines)


def _start() -> None:
    """No engine: a TextWorld engine is made by loading its first game, which the env does (``textworld.start``)."""
    return None


_pool: EnginePool | None = None


def engine_pool() -> EnginePool:
    """The process-wide pool of idle TextWorld engines (an empty pool hands out None: the env starts an engine on its game)."""
    global _pool
    if _pool is None:
        _pool = EnginePool(_start, _close, lambda engine: True, ENGINE_MB)
    return _pool


def _close(engine: Any) -> None:
    if engine is not None:
        engine.close()


class TextWorldEnv(TextGameEnv):
    """Generated TextWorld games, scored by the game's own score (see the module docstring).

    Args:
        kinds: the game kinds listed (keys of :data:`GAME_KINDS`); default all.
        games_per_split: how many games of each split are listed per kind.
        tasks: task ids or a pattern over the listed ones (``"test/*"``).
        show_valid_actions: append the admissible commands to every observation.
        max_turns: replies before the episode is truncated.
    """

    task_fields = ("kind", "number")
    idle_command = "look"
    max_command_bytes = INPUT_BUFFER_SIZE  # the z-machine's input line (198 bytes): jericho cuts a longer one

    def __init__(
        self,
        kinds: Sequence[str] | None = None,
        games_per_split: Mapping[str, int] = DEFAULT_GAMES_PER_SPLIT,
        *,
        tasks: str | Sequence[str] | None = None,
        show_valid_actions: bool = False,
        max_turns: int = 100,
        **kwargs: Any,
    ):
        super().__init__(show_valid_actions=show_valid_actions, max_turns=max_turns, **kwargs)
        kinds = list(kinds or GAME_KINDS)
        unknown = sorted(set(kinds) - set(GAME_KINDS)) + sorted(set(games_per_split) - set(SPLIT_SEEDS))
        if unknown:
            raise ValueError(f"unknown TextWorld game kinds or splits: {unknown}")
        listed = [
            f"{split}/{kind}/{number}"
            for split, count in games_per_split.items()
            for kind in kinds
            for number in range(count)
        ]
        self._task_ids = select_tasks(listed, tasks)
        self.engine: Any = None
        self.commands: list[str] = []
        self._state: Any = None
        self._score = 0

    # ------------------------------------------------------------------ family hooks
    def _setup(self, task_id: str) -> str:
        with _LOAD_LOCK:
            self._load_game(task_id)
            self._state = self.engine.reset()
        self.commands, self._score = [], 0
        return screen_free(str(self._state.feedback))

    def _gold_path(self, task_id: str) -> partial[list[str]]:
        return partial(walkthrough, *parse_task_id(task_id))

    def _load_game(self, task_id: str) -> None:
        """Have the env's engine hold the task's game (taking an engine from the pool first); the caller holds the load lock."""
        game = str(game_file(*parse_task_id(task_id)))
        with warnings.catch_warnings():
            # jericho warns that it cannot find the score in a game it does not know; TextWorld reads its own.
            warnings.simplefilter("ignore", UnsupportedGameWarning)
            if self.engine is None:  # an idle engine of the pool, else a new one on this game
                self.engine = engine_pool().acquire() or textworld.start(game, textworld.EnvInfos(**INFOS))
            if self.engine.unwrapped.gamefile != game:
                self.engine.load(game)

    def _play(self, command: str) -> Played:
        verb = command.split(maxsplit=1)[0].lower() if command else ""
        if verb in FILE_VERBS:
            return Played(
                f"{verb!r} is not available: the game's files are not the agent's.", error=f"file verb {verb!r}"
            )
        if MARKUP & set(command):
            return Played("A command has no brackets ([ ] < >).", error=f"markup in command: {command[:80]!r}")
        self._state, score, done = self.engine.step(command)
        self.commands.append(command)
        reward = (score - self._score) / self._state.max_score
        self._score = score
        return Played(screen_free(str(self._state.feedback)), ended=bool(done), reward=reward)

    def _grade(self, answer: str | None) -> Verdict:
        details = {"score": self._score, "max_score": self._state.max_score, "moves": len(self.commands)}
        return Verdict(self._score / self._state.max_score, bool(self._state.won), details=details)

    def valid_actions(self) -> list[str]:
        return list(self._state.admissible_commands or []) if self._state is not None else []

    def _branch_state(self) -> dict[str, Any]:
        layers = _layers(self.engine)
        memo = {id(value): value for value in _rules(layers).values()}  # the game's rules are shared, not copied
        return {
            "task_id": self._require_episode().task_id,
            "z_machine": self.engine.unwrapped._jericho.get_state(),
            "rules": _rules(layers),
            "tracking": copy.deepcopy([_own_fields(layer) for layer in layers], memo),
            "state": copy.deepcopy(self._state, memo),
            "commands": list(self.commands),
            "score": self._score,
        }

    def _load_branch_state(self, state: dict[str, Any]) -> None:
        with _LOAD_LOCK:
            self._load_game(state["task_id"])
        layers = _layers(self.engine)
        # The snapshot's references to its engine's rules become this engine's (the same game, loaded here).
        memo = {id(state["rules"][key]): value for key, value in _rules(layers).items()}
        for layer, own in zip(layers, copy.deepcopy(state["tracking"], memo), strict=True):
            vars(layer).update(own)
        self.engine.unwrapped._jericho.set_state(state["z_machine"])
        self._state = copy.deepcopy(state["state"], memo)
        self.commands, self._score = list(state["commands"]), state["score"]

    def _teardown(self) -> None:
        if self.engine is not None:
            engine, self.engine = self.engine, None
            engine_pool().release(engine)


#: Wrapper fields that name the engine and its game, not the play: left as they are when a branch is captured or loaded.
_ENGINE_FIELDS = frozenset(
    {"_wrapped_env", "_jericho", "_game", "_inform7", "_gamefile", "gamefile", "request_infos", "_seed"}
)


def _layers(engine: Any) -> list[Any]:
    """TextWorld's wrappers over the z-machine, outermost first, down to its jericho environment."""
    layers = []
    while engine is not None:
        layers.append(engine)
        engine = getattr(engine, "_wrapped_env", None)
    return layers


def _own_fields(layer: Any) -> dict[str, Any]:
    return {name: value for name, value in vars(layer).items() if name not in _ENGINE_FIELDS}


def _rules(layers: list[Any]) -> dict[tuple[int, str], Any]:
    """The loaded game's rules each wrapper holds (``_game``, ``_inform7``), by wrapper depth and field."""
    return {
        (depth, name): value
        for depth, layer in enumerate(layers)
        for name, value in vars(layer).items()
        if name in ("_game", "_inform7")
    }
