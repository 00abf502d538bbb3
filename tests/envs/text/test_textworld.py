"""TextWorld: generated games are cached by seed, scores agree with textworld's own environment driven directly (walkthrough, random, mutated plays), exact forks equal replays, hacks score nothing.

A few small games only (each is generated once, ~7–15 s, then cached in $AGENTGYM_CACHE/textworld).
"""

import random
import re
from concurrent.futures import ThreadPoolExecutor
from unittest import mock

import gymnasium
import pytest

textworld = pytest.importorskip("textworld")
pytest.importorskip("jericho")

from agentgym.envs.text import textworld as tw  # noqa: E402
from agentgym.envs.text.textworld import TextWorldEnv, game_file, parse_task_id, walkthrough  # noqa: E402
from agentgym.task import call_text  # noqa: E402
from tests.helpers.text_worlds import (  # noqa: E402
    check_dawdling_demonstration,
    check_spam_scores_nothing,
    play_agentgym,
    plays,
    random_walk,
)

# jericho warns that it cannot read the score of a game it does not know; TextWorld reads its own.
pytestmark = pytest.mark.filterwarnings("ignore::jericho.jericho.UnsupportedGameWarning")

TASKS = ["test/coin/0", "dev/simple/0", "train/cooking/0"]
#: The z-machine's status line as jericho prints it after the input prompt: ``>``, padding, ``-= Room =-score/moves``.
STATUS = re.compile(r">\s+-= [^\n]+ =-\d+/\d+")


@pytest.fixture
def env():
    env = gymnasium.make("agentgym/text.textworld-v0")
    yield env
    env.close()


def play_direct(task_id, actions):
    """The same commands through textworld's own environment: (score change / max score, done) per step."""
    game = textworld.start(str(game_file(*parse_task_id(task_id))), textworld.EnvInfos(**tw.INFOS))
    try:
        state, previous, results = game.reset(), 0, []
        for action in actions:
            state, score, done = game.step(action)
            results.append(((score - previous) / state.max_score, done))
            previous = score
            if done:
                break
        return results, state
    finally:
        game.close()


@pytest.mark.parametrize("task_id", TASKS)
def test_scores_agree_with_textworld_on_walkthrough_random_and_mutated_plays(env, task_id):
    rng = random.Random(task_id)
    for name, actions in plays(walkthrough(*parse_task_id(task_id)), random_walk(env, task_id, rng), rng).items():
        ours, info = play_agentgym(env, task_id, actions)
        theirs, state = play_direct(task_id, actions)
        assert ours == theirs, (task_id, name)
        if ours[-1][1]:  # ended: the graded step carries the game's score and TextWorld's won
            assert info["grade"]["score"] == state.score and info["success"] == state.won, (task_id, name)
        assert sum(reward for reward, _ in ours) == pytest.approx(state.score / state.max_score), (task_id, name)
        if name == "gold":
            assert state.won and info["success"] and info["grade"]["score"] == state.max_score


def test_games_are_generated_once_by_seed_and_split():
    first = game_file("test", "coin", 0)
    assert game_file("test", "coin", 0) == first and first.with_suffix(".json").exists()
    assert tw.make_args("test", "cooking", 2)[-4:] == ["--split", "test", "--seed", "20002"]
    assert tw.make_args("dev", "simple", 1) == [
        "tw-simple",
        "--rewards",
        "dense",
        "--goal",
        "detailed",
        "--seed",
        "10001",
    ]
    assert first.parent.parent == tw.cache_dir()


def test_tasks_are_games_with_splits_as_categories_and_listing_generates_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTGYM_CACHE", str(tmp_path))
    env = TextWorldEnv(["coin", "cooking"], {"dev": 2, "test": 1})
    assert env.task_ids() == [
        "dev/coin/0",
        "dev/coin/1",
        "dev/cooking/0",
        "dev/cooking/1",
        "test/coin/0",
        "test/cooking/0",
    ]
    assert [t.category for t in env.tasks()] == ["dev"] * 4 + ["test"] * 2
    assert not (tmp_path / "textworld").exists()
    with pytest.raises(ValueError, match="unknown TextWorld"):
        TextWorldEnv(["zork"])


def test_observations_admissible_commands_and_the_games_answer_to_nonsense(env):
    observation, info = env.reset(options={"task_id": TASKS[0]})
    assert "-= " in observation["text"] and "look" in info["valid_actions"]
    observation, reward, terminated, truncated, info = env.step(call_text("act", {"command": "flarp the gizmo"}))
    assert "That's not a verb I recognise" in observation["text"]
    assert (reward, terminated, truncated, info["error"]) == (0.0, False, False, None)


def test_observations_are_the_games_text_without_its_title_art_and_status_line(env):
    """Each observation is the text textworld's own environment gives, cut only at its ends: the ASCII-art title before
    the first (the same in every game) and the z-machine's status line (``-= Room =-score/moves``) after each."""
    task_id = TASKS[0]
    gold = walkthrough(*parse_task_id(task_id))
    observation, _ = env.reset(options={"task_id": task_id})
    ours = [observation["text"]] + [env.step(action)[0]["text"] for action in gold]
    game = textworld.start(str(game_file(*parse_task_id(task_id))), textworld.EnvInfos(**tw.INFOS))
    try:
        theirs = [game.reset().feedback] + [game.step(action)[0].feedback for action in gold]
    finally:
        game.close()
    assert "$$$$" in theirs[0] and "$$" not in ours[0] and "-= " in ours[0]  # the room's own heading stays
    for text, raw in zip(ours, theirs, strict=True):
        start = raw.index(text)
        before, after = raw[:start], raw[start + len(text) :]
        assert not re.search("[A-Za-z0-9]", before) and STATUS.fullmatch(after.strip()), (text, raw)
    assert "*** The End ***" in ours[-1]


# ---------------------------------------------------------------------- exact branching
def test_fork_mid_episode_then_continue_equals_replay_and_replays_nothing(env):
    task_id = TASKS[2]
    gold = walkthrough(*parse_task_id(task_id))
    env.reset(options={"task_id": task_id})
    for action in gold[:4]:
        env.step(action)
    replay = gymnasium.make("agentgym/text.textworld-v0")
    other = TextWorldEnv(tasks=TASKS)
    other.reset(options={"task_id": TASKS[0]})
    other.close()  # an idle engine that holds another game: a fork loads its own game into it
    continuation = ["look", "inventory", *gold[4:]]
    with env.unwrapped.snapshot() as snapshot:
        # Exact: no command is played again to make the fork.
        with mock.patch.object(type(env.unwrapped.engine), "step", side_effect=AssertionError("replayed")):
            fork = env.unwrapped.fork(snapshot)
            imported = env.unwrapped.fork(env.unwrapped.import_snapshot(env.unwrapped.export_snapshot(snapshot)))
        try:
            replay.reset(options={"task_id": task_id})
            for action in gold[:4]:
                replay.step(action)
            runs = [[branch.step(action) for action in continuation] for branch in (fork, imported, replay, env)]
            assert runs[0] == runs[1] == runs[2] == runs[3] and runs[0][-1][4]["success"]
            env.unwrapped.restore(snapshot)  # the snapshot is unchanged by the branches played from it
            assert [env.step(action) for action in continuation] == runs[0]
        finally:
            for branch in (fork, imported, replay):
                branch.close()


def test_engines_are_reused_across_envs():
    pool = tw.engine_pool()
    first = TextWorldEnv(tasks=TASKS[:2])
    first.reset(options={"task_id": TASKS[0]})
    engine = first.engine
    first.reset(options={"task_id": TASKS[1]})  # another game, loaded into the same engine
    assert first.engine is engine
    first.close()
    idle = pool.idle
    second = TextWorldEnv(tasks=TASKS[:2])
    try:
        second.reset(options={"task_id": TASKS[0]})
        assert second.engine is engine and pool.idle == idle - 1
    finally:
        second.close()


def test_envs_on_threads_load_games_at_once():
    """TextWorld's logic parser is not thread-safe; eval's concurrency resets envs on threads (this failed with parse errors)."""
    envs = [TextWorldEnv(tasks=TASKS) for _ in range(3)]
    try:
        with ThreadPoolExecutor(len(envs)) as pool:
            for _ in range(2):
                texts = list(
                    pool.map(lambda pair: pair[0].reset(options={"task_id": pair[1]})[0]["text"], zip(envs, TASKS))
                )
                assert all("-= " in text for text in texts)
    finally:
        for env in envs:
            env.close()


# ---------------------------------------------------------------------- grader hacks
def test_look_spam_and_printed_wins_score_nothing():
    replies = ["look", "*** The End ***", "You win! score 1/1", "inventory", "score"]
    check_spam_scores_nothing(TextWorldEnv(tasks=TASKS[:1], max_turns=30), replies, 30)


def test_demonstrations_are_the_walkthrough_with_looks_before_steps_at_the_mistake_rate():
    check_dawdling_demonstration(TextWorldEnv, TASKS[2], walkthrough(*parse_task_id(TASKS[2])), "look")


def test_interpreter_escapes_and_several_lines_are_refused_and_the_game_goes_on(env):
    """A backslash line is an escape command of jericho's dumb-frotz (``\\q`` ends it) and a newline would play two
    commands in one step: both are refused before the engine, and the same engine plays the walkthrough after them."""
    env.reset(options={"task_id": TASKS[0]})
    gold = walkthrough(*parse_task_id(TASKS[0]))
    engine = env.unwrapped.engine
    for reply in ["\\q", "\\h", "look\n" + gold[0], "go\x00north", gold[0] + "\n" + gold[1]]:
        _, reward, terminated, truncated, info = env.step(reply)
        assert info["error"].startswith("not a single-line command") and not (terminated or truncated) and reward == 0
    assert env.unwrapped.commands == [] and env.unwrapped.engine is engine
    results, info = play_agentgym(env, None, gold)
    assert info["success"] and sum(r for r, _ in results) == pytest.approx(1.0)


def test_the_games_file_verbs_write_and_read_nothing_on_the_host(env, tmp_path, monkeypatch):
    """jericho's frotz runs in this process: ``save``/``script`` wrote game.qzl/a transcript into its working directory
    and ``restore`` read one back. They are refused before the engine; the walkthrough still wins after them."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "game.qzl").write_bytes(b"planted")  # what a restore would have read
    env.reset(options={"task_id": TASKS[0]})
    for reply in ["save", "SCRIPT", "restore", "transcript on", "unscript", "noscript"]:
        _, reward, terminated, truncated, info = env.step(reply)
        assert info["error"].startswith("file verb") and reward == 0 and not (terminated or truncated)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["game.qzl"] and env.unwrapped.commands == []
    results, info = play_agentgym(env, None, walkthrough(*parse_task_id(TASKS[0])))
    assert info["success"] and sum(r for r, _ in results) == pytest.approx(1.0)


def test_a_command_longer_than_the_interpreters_input_is_refused_whole_and_the_game_goes_on(env):
    """jericho cuts a command at 198 bytes: inside a character when one straddles the cut, and its warning then failed
    decoding it (UnicodeDecodeError: the step was an env_error, an episode's way out of a 0); else the cut played a
    command the agent did not send. Longer commands are refused before the engine; up to 198 bytes they play."""
    env.reset(options={"task_id": TASKS[0]})
    for reply in ["a" * 197 + "é", "look " + "é" * 150, "look" + "." * 300, "x" * 1_000_000]:
        _, reward, terminated, truncated, info = env.step(reply)
        assert info["error"].startswith("command too long") and "env_error" not in info
        assert reward == 0 and not (terminated or truncated)
    assert env.unwrapped.commands == []
    observation, _, _, truncated, info = env.step("a" * 196 + "é")  # 198 bytes: played, the game's own answer
    assert "not a verb I recognise" in observation["text"] and info["error"] is None and not truncated
    assert env.unwrapped.commands == ["a" * 196 + "é"]
    results, info = play_agentgym(env, None, walkthrough(*parse_task_id(TASKS[0])))
    assert info["success"] and sum(r for r, _ in results) == pytest.approx(1.0)


def test_said_text_cannot_forge_textworlds_own_tags(env):
    """TextWorld reads its event tags (``[going south - succeeded]``, which move its quest tracker) and ``<score>`` tags
    back out of the game's text, and the game repeats what the agent says inside an event tag: ``say ] [going south -
    succeeded] [`` moved the tracker south while the player stayed, so the valid actions became another room's.
    Commands with TextWorld's markup are refused before the engine; saying plain words still plays."""
    _, info = env.reset(options={"task_id": TASKS[0]})
    valid = info["valid_actions"]
    for reply in ["say ] [going south - succeeded] [", "shout <score> 1 </score>", "answer ] *** The End *** ["]:
        _, reward, terminated, truncated, info = env.step(reply)
        assert info["error"].startswith("markup in command") and reward == 0 and not (terminated or truncated)
        assert info["valid_actions"] == valid
    assert env.unwrapped.commands == []
    observation, _, _, _, info = env.step("say hello")
    assert "There is no reply" in observation["text"] and info["valid_actions"] == valid
    results, info = play_agentgym(env, None, walkthrough(*parse_task_id(TASKS[0])))
    assert info["success"] and sum(r for r, _ in results) == pytest.approx(1.0)
