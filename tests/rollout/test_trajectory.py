"""Trajectory records: the env-token mask, training sequences across folds, trees' paths, compact serialisation."""

import json

import pytest

from agentgym.rollout.trajectory import RolloutTree, Trajectory, Turn


def turn(prompt, completion, mask=None, **kw):
    return Turn(
        prompt_ids=prompt,
        completion_ids=completion,
        logprobs=[-0.1 * (i + 1) for i in range(len(completion))],
        prompt_mask=mask if mask is not None else [0] * len(prompt),
        **kw,
    )


def folded_trajectory():
    # Turn 0: prompt [1,2] → [3,4]; env adds [5]. Turn 1 extends it: [1,2,3,4,5] → [6].
    # Then the context is folded: turn 2's prompt [1,9,5,6,7] is fresh (all context), → [8].
    t0 = turn([1, 2], [3, 4], reward=0.0)
    t1 = turn([1, 2, 3, 4, 5], [6], mask=[0, 0, 1, 1, 0])
    t2 = turn([1, 9, 5, 6, 7], [8], reward=1.0, terminated=True, folded=True)
    return Trajectory("t", "env", [t0, t1, t2], reward=1.0, success=True, terminated=True)


def test_turn_checks_its_lengths_and_builds_the_mask():
    with pytest.raises(ValueError, match="prompt_mask"):
        Turn([1, 2], [3], [-1.0], [0])
    with pytest.raises(ValueError, match="logprobs"):
        Turn([1], [3, 4], [-1.0], [0])
    t = turn([1, 2, 3, 4, 5], [6], mask=[0, 0, 1, 1, 0])
    assert t.input_ids == [1, 2, 3, 4, 5, 6] and t.mask == [0, 0, 1, 1, 0, 1]


def test_sequences_split_at_folds_and_align_logprobs():
    first, second = folded_trajectory().sequences()
    assert first.input_ids == [1, 2, 3, 4, 5, 6]
    assert first.mask == [0, 0, 1, 1, 0, 1]
    assert first.logprobs == pytest.approx([0, 0, -0.1, -0.2, 0, -0.1])
    assert first.turn_spans == [(2, 4), (5, 6)] and first.turn_indices == [0, 1]
    assert second.input_ids == [1, 9, 5, 6, 7, 8] and second.mask == [0, 0, 0, 0, 0, 1]
    assert second.turn_spans == [(5, 6)] and second.turn_indices == [2]


def test_serialisation_round_trips_and_stores_extending_prompts_as_deltas():
    trajectory = folded_trajectory()
    data = json.loads(json.dumps(trajectory.to_dict()))
    assert data["turns"][1]["prompt_ids"] == {"shared": 4, "new": [5]}
    assert data["turns"][2]["prompt_ids"] == [1, 9, 5, 6, 7]  # a fold: stored whole
    assert Trajectory.from_dict(data) == trajectory


def test_tree_paths_share_prefixes_and_sum_rewards():
    tree = RolloutTree("t", "env")
    a = tree.add(None, turn([1], [2]))
    b = tree.add(a.id, turn([1, 2, 3], [4], mask=[0, 1, 0], reward=1.0, terminated=True))
    c = tree.add(a.id, turn([1, 2, 3], [5], mask=[0, 1, 0], reward=0.5, terminated=True))
    d = tree.add(None, turn([1], [7], reward=0.25, terminated=True))
    tree.leaf_success[b.id] = True
    assert [n.id for n in tree.roots] == [a.id, d.id] and [n.id for n in tree.leaves] == [b.id, c.id, d.id]
    paths = {p.metadata["leaf"]: p for p in tree.paths()}
    assert paths[b.id].reward == 1.0 and paths[b.id].success and not paths[c.id].success
    assert paths[c.id].sequences()[0].input_ids == [1, 2, 3, 5]
    assert tree.num_env_steps == 4 and tree.num_generated_tokens == 4
    data = json.loads(json.dumps(tree.to_dict()))
    assert data["nodes"][1]["turn"]["prompt_ids"] == {"shared": 2, "new": [3]}
    assert RolloutTree.from_dict(data) == tree


def test_every_rollout_export_resolves_without_importing_torch_eagerly():
    import subprocess
    import sys

    probe = (
        "import sys, agentgym.rollout as r; assert 'torch' not in sys.modules;"
        "[getattr(r, name) for name in r.__all__]; print(len(r.__all__))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
