"""Images in token mode: the agent loop with a local tiny Qwen2-VL (HFPolicy) keeps prompts token-exact and prefix-preserving, images by hash."""

import hashlib

import pytest

from agentgym.models import tiny_vlm_path
from agentgym.rollout.agent import Agent, AgentConfig, FoldPolicy
from agentgym.rollout.hf_policy import HFPolicy
from agentgym.rollout.images import ImageConfig
from agentgym.rollout.policy import SamplingParams
from tests.helpers.counter import ScreenCounterEnv
from tests.helpers.scripted import ScriptedPolicy


@pytest.fixture(scope="module")
def vlm_policy():
    import asyncio

    policy = HFPolicy(tiny_vlm_path(), device="cpu")
    yield policy
    asyncio.run(policy.aclose())


@pytest.fixture
def env():
    env = ScreenCounterEnv()
    yield env
    env.close()


async def test_every_image_stays_until_a_fold_and_prompts_extend_each_other(vlm_policy, env):
    config = AgentConfig(images=ImageConfig(keep_last=1), max_turns=3, sampling=SamplingParams(max_tokens=8))
    trajectory = await Agent(vlm_policy, config).run(env, "reach-7")
    turns = trajectory.turns
    assert len(turns) == 3 and not any(t.folded for t in turns)
    # Prefix-preserving: no image becomes a stub between turns, so turn k's prompt holds k + 1 images.
    assert [len(t.image_hashes) for t in turns] == [1, 2, 3]
    for before, after in zip(turns, turns[1:]):
        assert after.extends(before) and after.image_hashes[: len(before.image_hashes)] == before.image_hashes
    for turn in turns:
        assert len(vlm_policy.chat_format.image_runs(turn.prompt_ids)) == len(turn.image_hashes)
    assert set(trajectory.images) == {h for t in turns for h in t.image_hashes}
    assert all(hashlib.sha256(data).hexdigest() == h for h, data in trajectory.images.items())
    assert len(trajectory.sequences()) == 1


async def test_a_fold_drops_the_images_beyond_keep_last(vlm_policy, env):
    # Each turn adds about 98 prompt tokens here (8 sampled, ~78 of error text, a 12-token image) to a
    # first prompt of ~382: the fourth prompt (~676) is over 660 - 8, the third (~578) is not; folded
    # (three images and two observations as stubs) it is ~617. (The tiny VLM's images are cheaper than
    # their 17-token stubs; a real VLM's hundreds of tokens per image are where the stubs pay.)
    config = AgentConfig(
        images=ImageConfig(keep_last=1),
        max_turns=4,
        sampling=SamplingParams(max_tokens=8),
        context_window=660,
        fold=FoldPolicy(keep_last=1),
    )
    trajectory = await Agent(vlm_policy, config).run(env, "reach-7")
    assert not trajectory.error and [t.folded for t in trajectory.turns] == [False, False, False, True]
    last = trajectory.turns[-1]
    assert len(last.image_hashes) == 1 and vlm_policy.chat_format.image_runs(last.prompt_ids) == [12]
    prompt = vlm_policy.chat_format.tokenizer.decode(last.prompt_ids)
    assert prompt.count("removed to save context]") == 3 and sum(last.prompt_mask) == 0
    assert prompt.count("folded to save context") == 2  # the text of observations 1 and 2, beside their image stubs
    assert len(last.prompt_ids) + 8 <= 660
    assert len(trajectory.sequences()) == 2


def test_a_text_model_in_token_mode_refuses_images():
    with pytest.raises(ValueError, match="takes no images in token mode"):
        Agent(ScriptedPolicy(["x"]), AgentConfig(images=ImageConfig()))


async def test_a_tree_keeps_every_nodes_images_and_each_path_its_own(vlm_policy, env, tmp_path):
    from agentgym.rollout.store import TrajectoryStore
    from agentgym.rollout.tree import TreeConfig, TreeRollout

    config = AgentConfig(images=ImageConfig(keep_last=1), max_turns=3, sampling=SamplingParams(max_tokens=8))
    tree_config = TreeConfig(strategy="uniform", branch_every=1, branches=2, max_leaves=4, max_env_steps=12)
    tree = await TreeRollout(Agent(vlm_policy, config), tree_config).run(env, "reach-7")
    used = {h for node in tree.nodes for h in node.turn.image_hashes}
    assert len(tree.nodes) > 3 and used and set(tree.images) == used
    assert all(hashlib.sha256(data).hexdigest() == h for h, data in tree.images.items())
    for path in tree.paths():  # a path is a trajectory whose images are its own turns'
        assert set(path.images) == {h for t in path.turns for h in t.image_hashes}
    with TrajectoryStore(tmp_path / "trees.jsonl") as store:
        store.append(tree)  # no warning of missing image bytes
        assert {h: store.image(h) for h in used} == tree.images
