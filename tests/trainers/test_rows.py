"""Rollouts as TRL batches: a hand-built tree's paths, masks, per-turn advantages and padding (KeyChain itself: tests/envs/tool/test_keychain.py)."""

from __future__ import annotations

import pytest
import torch

from agentgym.rollout.trajectory import RolloutTree, Turn
from agentgym.trainers.rollouts import collate, pad_rows, record_metrics, trajectory_rows
from agentgym.trainers.tree_grpo import tree_training_paths


def _turn(prompt, mask, completion, reward=0.0, done=False):
    return Turn(
        prompt_ids=prompt,
        completion_ids=completion,
        logprobs=[-0.1] * len(completion),
        prompt_mask=mask,
        reward=reward,
        terminated=done,
    )


def _tree() -> RolloutTree:
    """Root 0 (ids 10 11) → env token 3 → children 1 (id 12, R = 1) and 2 (id 13, R = 0); root 3 (id 14) ends with R = 0."""
    tree = RolloutTree(task_id="t", env_id="e")
    tree.add(None, _turn([1, 2], [0, 0], [10, 11]))
    tree.add(0, _turn([1, 2, 10, 11, 3], [0, 0, 1, 1, 0], [12], reward=1.0, done=True))
    tree.add(0, _turn([1, 2, 10, 11, 3], [0, 0, 1, 1, 0], [13], done=True))
    tree.add(None, _turn([1, 2], [0, 0], [14], done=True))
    tree.leaf_success = {1: True, 2: False, 3: False}
    return tree


def test_tree_paths_train_each_node_once_with_its_advantage():
    paths, advantages, trainable, outcomes = tree_training_paths(_tree())
    assert [p.metadata["leaf"] for p in paths] == [1, 2, 3]
    assert advantages == [[0.5, 1.0], [0.5, -1.0], [-0.5]]
    assert trainable == [[True, True], [False, True], [True]]  # root 0 gets its loss on the first path only
    assert sorted(outcomes) == [0.0, 0.0, 1.0]
    rows = [row for p, a, t in zip(paths, advantages, trainable) for row in trajectory_rows(p, a, t)]
    assert [r.prompt_ids for r in rows] == [[1, 2]] * 3
    assert rows[0].completion_ids == [10, 11, 3, 12]
    assert rows[0].loss_mask == [1, 1, 0, 1]  # the env token 3 never gets loss
    assert rows[0].advantages == [0.5, 0.5, 0.0, 1.0]
    assert rows[1].loss_mask == [0, 0, 0, 1]
    assert rows[1].advantages == [0.5, 0.5, 0.0, -1.0]
    assert rows[0].turn_starts == [0, 3] and rows[0].turn_rewards == [0.0, 1.0]
    assert rows[2].completion_ids == [14] and rows[2].advantages == [-0.5]

    batch = collate(pad_rows(rows, 2), pad_id=0, device="cpu")
    assert batch["completion_ids"].shape == (4, 4)  # padded to a multiple of 2 rows
    assert batch["tool_mask"][3].sum() == 0  # the padding row has no loss
    assert batch["completion_mask"][2].tolist() == [1, 0, 0, 0]
    assert torch.allclose(batch["sampling_per_token_logps"][0], torch.tensor([-0.1, -0.1, 0.0, -0.1]))


def test_cut_leaf_paths_get_no_loss():
    tree = _tree()
    tree.leaf_errors[2] = "budget_exhausted"
    paths, advantages, trainable, outcomes = tree_training_paths(tree)
    assert [p.metadata["leaf"] for p in paths] == [1, 3]
    assert advantages[0] == [1.0, 1.0]  # node 1 has no usable sibling left: it inherits root 0's advantage
    assert sorted(outcomes) == [0.0, 1.0]


def test_record_metrics_of_a_tree():
    metrics = record_metrics([_tree()])
    assert metrics["rollout/success_rate"] == pytest.approx(1 / 3)
    assert metrics["tree/leaves"] == 3 and metrics["tree/nodes"] == 4 and metrics["tree/depth"] == 2
    assert metrics["rollout/env_steps"] == 4
