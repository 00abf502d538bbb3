"""Both trainers train the tiny Qwen2-VL on screenshot envs (MiniWoB++ in Chromium, the Docker desktop): screenshots in
the prompts, the loss's logprobs recomputed with the images' pixels, env tokens (screenshots included) without loss."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium
import pytest
import torch

from agentgym.models import tiny_vlm_path
from agentgym.rollout.store import TrajectoryStore
from agentgym.trainers.rollouts import image_inputs
from agentgym.wrappers import BranchingWrapper

MINIWOB = ("agentgym/web.miniwob.click-button-v0", {"set_of_marks": True})
DESKTOP = ("agentgym/gui.desktop-v0", {})


class LongerActionsPay(BranchingWrapper):
    """A stand-in reward on top of the env's: 0.05 per character of the action. The tiny random-weight VLM never
    solves a task, so every reward would be 0 and every advantage too; its random actions' lengths differ between
    samples (a parity reward tied a whole group now and then, and the step had no gradient), so the policy gets one.
    The env, its screenshots and its forks are the real ones."""

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return observation, reward + 0.05 * len(str(action)), terminated, truncated, info


def shaped_env(env_id: str, **kwargs):
    return LongerActionsPay(gymnasium.make(env_id, **kwargs))


def _trainer(kind: str, env: tuple[str, dict], tmp_path, task: str | None):
    env_id, env_kwargs = env
    common = dict(
        output_dir=str(tmp_path),
        env_id=f"{__name__}:shaped_env",
        env_kwargs={"env_id": env_id, **env_kwargs},
        images={"max_side": 128, "thumbnail_side": 0},  # the tiny VLM: at most 16 image tokens per screenshot
        max_turns=2,
        max_turn_tokens=4,
        rollout_concurrency=1,
        max_steps=2,
        learning_rate=1e-2,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
        train_tasks=[task] * 2 if task else None,
    )
    if kind == "tree_grpo":
        from agentgym.trainers.tree_grpo import TreeGRPOTrainer
        from agentgym.trainers.tree_grpo_config import TreeGRPOConfig

        # Two tasks per generation over two steps, one optimizer step each: TRL's (and our) old logprobs are computed.
        args = TreeGRPOConfig(
            num_generations=2,
            per_device_train_batch_size=1,
            steps_per_generation=2,
            tree_max_leaves=3,
            beta=0.0,
            **common,
        )
        return TreeGRPOTrainer(str(tiny_vlm_path()), args)
    from agentgym.trainers.sao import SAOTrainer
    from agentgym.trainers.sao_config import SAOConfig

    args = SAOConfig(per_device_train_batch_size=2, log_kl_to_start=False, **common)
    return SAOTrainer(str(tiny_vlm_path()), args)


def _trains_with_pixels(kind: str, env: tuple[str, dict], tmp_path, task: str | None = None) -> None:
    trainer = _trainer(kind, env, tmp_path, task)
    generate = trainer._generate_and_score_completions
    checked: list[dict] = []

    def checking(inputs):
        batch = generate(inputs)
        if not checked:  # the weights that sampled it are still the learner's
            checked.append(_recomputed(trainer, batch))
        return batch

    trainer._generate_and_score_completions = checking
    policy = {k: v.detach().clone() for k, v in trainer.model.named_parameters() if not k.startswith("value_model.")}
    trainer.train()
    [batch] = checked
    assert min(batch["num_images"]) >= 1  # every sequence carries its screenshots
    prompt_width = batch["prompt_ids"].size(1)
    trained = (batch["completion_mask"] * batch["tool_mask"]).bool()
    completion_images = batch["mm_token_type_ids"][:, prompt_width:] == 1
    assert completion_images.any()  # a later turn's screenshot sits inside the completion part...
    assert not (trained & completion_images).any()  # ...as env tokens: no loss
    assert trained.any() and (batch["completion_mask"].bool() & ~trained).any()  # model tokens trained, env ones not
    torch.testing.assert_close(
        batch["recomputed"][trained], batch["sampling_per_token_logps"][trained], atol=1e-4, rtol=0
    )
    assert (batch["other_pixels"][trained] - batch["recomputed"][trained]).abs().max() > 1e-3
    if "old_per_token_logps" in batch:  # the trainer's own recompute (TRL's path) saw the pixels too
        torch.testing.assert_close(
            batch["old_per_token_logps"][trained], batch["recomputed"][trained], atol=1e-5, rtol=0
        )
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(after[k], v) for k, v in policy.items())  # the policy learned


def _recomputed(trainer, batch: dict) -> dict:
    """The batch plus its logprobs recomputed as the loss does (TRL's forward with the batch's pixels), and with
    other pixels of the same shape."""
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    keep = batch["completion_ids"].size(1)
    images = image_inputs(batch)
    other = {**images, "pixel_values": -images["pixel_values"]}  # the same images, their colours inverted
    with torch.no_grad():
        recomputed = trainer._get_per_token_logps_and_entropies(
            trainer.model, input_ids, attention_mask, keep, **images
        )
        shuffled = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, attention_mask, keep, **other)
    return {**batch, "recomputed": recomputed[0], "other_pixels": shuffled[0]}


# The same checks as on the desktop's screenshots, through Chromium: `make test-sweeps` (the example config's run
# below trains on MiniWoB++ in `make test`).
@pytest.mark.sweep
@pytest.mark.browser
@pytest.mark.parametrize("kind", ["tree_grpo", "sao"])
def test_a_vlm_trains_on_miniwob_screenshots(kind, tmp_path):
    _trains_with_pixels(kind, MINIWOB, tmp_path, task="click-button")


# Tree GRPO on the VLM is trained through the CLI below (on MiniWoB's screenshots); SAO here on the desktop's,
# tree GRPO on them in the sweep (20 s each on two cores).
@pytest.mark.slow
@pytest.mark.parametrize("kind", [pytest.param("tree_grpo", marks=pytest.mark.sweep), "sao"])
def test_a_vlm_trains_on_desktop_screenshots(kind, tmp_path, desktop_image):
    _trains_with_pixels(kind, (DESKTOP[0], {"image": desktop_image}), tmp_path)


def _trains_through_the_cli(config_name: str, tmp_path) -> list:
    """`agentgym train --config examples/configs/<config_name>` as a user runs it (two steps of tree GRPO on the
    tiny VLM, two trees a step); the trees it logged, every screenshot shown kept."""
    config = Path(__file__).resolve().parents[2] / "examples" / "configs" / config_name
    agentgym_cli = Path(sys.executable).with_name("agentgym")
    result = subprocess.run(
        [str(agentgym_cli), "train", "--config", str(config), f"output_dir={tmp_path}", "report_to=none"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    logged = [json.loads(line) for line in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert len(logged) == 4  # two steps × two trees
    store = TrajectoryStore(tmp_path / "trajectories.jsonl")
    trees = list(store.read())
    for tree in trees:
        hashes = {h for node in tree.nodes for h in node.turn.image_hashes}
        assert hashes and all(len(store.image(h)) > 0 for h in hashes)  # every screenshot shown is kept
    return trees


@pytest.mark.slow
@pytest.mark.browser
def test_the_vlm_example_config_trains_through_the_cli(tmp_path):
    _trains_through_the_cli("vlm_miniwob.yaml", tmp_path)


@pytest.mark.sweep  # minutes: a desktop with mousepad per tree, forks replaying the prefix
def test_the_vlm_trains_on_a_real_desktop_app_with_forks(tmp_path, desktop_apps_image):
    """examples/configs/vlm_desktop_apps.yaml: tree GRPO on mousepad's text-fix-0 in the desktop-apps image; every
    tree branches mid-episode (a node with two children: the second continues in a fork of the live desktop)."""
    trees = _trains_through_the_cli("vlm_desktop_apps.yaml", tmp_path)
    assert all(any(len(node.children) > 1 for node in tree.nodes) for tree in trees)  # a second child is a fork
