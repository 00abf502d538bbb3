"""The text worlds train from their example configs: tree GRPO and SAO on TextWorld and ScienceWorld, two steps each on the tiny model (TextWorld's from a warm start on its walkthroughs), and the split listing the warm start and the held-out measurement share."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

pytest.importorskip("textworld")
pytest.importorskip("scienceworld")

from agentgym.train import build_trainer, load_config  # noqa: E402
from agentgym.trainers.warm_start import agent_config, demonstrations, split_tasks  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[2] / "examples" / "configs"
# Two tasks (one step's batch) and three turns: a smoke run of each config (the learning is measured by
# benchmarks/learning.py). train/coin/0 and 1 are games generated at first use (~7 s each, then cached).
SMALL = {
    "textworld": "env_kwargs={kinds: [coin], games_per_split: {train: 2}, tasks: 'train/*'}",
    "scienceworld": "env_kwargs={task_types: [lifespan-longest-lived], variations_per_split: {train: 2}, "
    "tasks: 'train/*'}",
}
PER_TRAINER = {
    "tree_grpo": ["num_generations=2", "tree_max_leaves=4", "rollout_concurrency=2"],
    "sao": ["rollout_concurrency=2", "producer_queue_size=4"],
}


# make test trains each world once and each trainer once (about 25 s each on 2 cores); the other two pairs are in
# the sweep, for make test's time.
@pytest.mark.parametrize(
    ("world", "trainer"),
    [
        ("textworld", "tree_grpo"),
        ("scienceworld", "sao"),
        pytest.param("textworld", "sao", marks=pytest.mark.sweep),
        pytest.param("scienceworld", "tree_grpo", marks=pytest.mark.sweep),
    ],
)
def test_a_text_world_config_trains_two_steps(tmp_path, world, trainer):
    overrides = [
        f"output_dir={tmp_path / 'run'}",
        "resume=false",
        "max_steps=2",
        "max_turns=3",
        "per_device_train_batch_size=2",
        "save_strategy=no",
        "report_to=none",
        SMALL[world],
        *PER_TRAINER[trainer],
    ]
    if (world, trainer) == ("textworld", "tree_grpo"):  # `warm_start:` scripts its demonstrations from walkthroughs
        overrides.append("warm_start={tasks: 1, epochs: 1, mistake_rate: 0.5}")
    run = build_trainer(load_config(CONFIGS / f"{world}-{trainer}.yaml", overrides))
    run.train()
    assert run.state.global_step == 2
    steps = [h["rollout/env_steps_total"] for h in run.state.log_history if "rollout/env_steps_total" in h]
    assert steps and steps[-1] > 0
    if "warm_start" in overrides[-1]:
        assert (tmp_path / "run" / "warm_start" / "model.safetensors").exists()


def test_split_tasks_names_a_split_in_generated_and_listed_catalogs():
    keychain = load_config(CONFIGS / "keychain-tree_grpo.yaml")
    assert split_tasks(keychain, "heldout", 2, skip=3) == (
        {"split": "train", "num_tasks": 200, "max_hops": 2, "tasks": ["heldout-3", "heldout-4"]},
        ["heldout-3", "heldout-4"],
    )
    textworld = load_config(CONFIGS / "textworld-tree_grpo.yaml")  # lists train and test, selects train
    kwargs, ids = split_tasks(textworld, "test", 2, skip=1)
    assert ids == ["test/coin/1", "test/coin/2"] and kwargs["tasks"] == ids
    assert kwargs["games_per_split"] == textworld["env_kwargs"]["games_per_split"]
    with pytest.raises(ValueError, match="lists 30 test tasks .*; 31 are needed"):
        split_tasks(textworld, "test", 30, skip=1)


def test_a_dawdling_demonstration_ends_at_max_turns_and_a_short_script_with_its_last_reply(tmp_path):
    from transformers import AutoTokenizer

    from agentgym.models import tiny_model_path
    from agentgym.registration import make_env_factory

    config = load_config(CONFIGS / "textworld-tree_grpo.yaml", [SMALL["textworld"], "max_turns=8"])
    factory = make_env_factory(config["env_id"], config["env_kwargs"])
    env = factory()
    try:
        walkthrough = env.unwrapped.demonstration_replies("train/coin/0")
        dawdling = env.unwrapped.demonstration_replies("train/coin/0", 1.0, random.Random(0))
    finally:
        env.close()
    assert dawdling == [reply for step in walkthrough for reply in ("look", step)]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path())
    loop = agent_config(config, greedy=True)  # 8 turns: more than the walkthrough's 5, fewer than the dawdler's 10
    scripts = iter([walkthrough, dawdling, walkthrough[:3]])
    solved, dawdled, short = demonstrations(factory, ["train/coin/0"] * 3, lambda _: next(scripts), tokenizer, loop)
    assert solved.success and len(solved.turns) == len(walkthrough)
    assert not dawdled.success and len(dawdled.turns) == 8  # out of turns one move short
    # A script that stops before the game ends stops its episode: nothing the script did not say is trained on.
    assert not short.success and len(short.turns) == 3
