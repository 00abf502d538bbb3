"""Tree values, per-turn advantages and the prefix-sharing saving, on trees worked out by hand."""

import pytest

from agentgym.rollout.trajectory import RolloutTree, Turn
from agentgym.rollout.tree_values import (
    assign_values,
    node_values,
    prefix_sharing_saving,
    turn_advantages,
    usable_returns,
)


def build(spec):
    """A tree from (parent, step reward, completion length) rows, in id order."""
    tree = RolloutTree(task_id="t", env_id="e")
    for parent, reward, tokens in spec:
        tree.add(
            parent,
            Turn(prompt_ids=[], completion_ids=[7] * tokens, logprobs=[0.0] * tokens, prompt_mask=[], reward=reward),
        )
    return tree


# Two roots with branches of unequal size. Rewards are per step; a leaf's reward is its path's sum.
#
#        0 (r 0, 10 tok)                         6 (r 0.5, 8 tok)
#       /              \                        /               \
#   1 (r 0, 4)       2 (r 0, 6)           7 (r 0.5, 1)       8 (r 0, 3)
#   /   |   \          leaf 0               leaf 1.0           leaf 0.5
#  3     4    5
# r1,2  r0,2  r1,2   (each 2 tokens)      leaves 1, 0, 1
UNEVEN = [
    (None, 0.0, 10),
    (0, 0.0, 4),
    (0, 0.0, 6),
    (1, 1.0, 2),
    (1, 0.0, 2),
    (1, 1.0, 2),
    (None, 0.5, 8),
    (6, 0.5, 1),
    (6, 0.0, 3),
]


def test_node_values_average_children_not_leaves():
    tree = build(UNEVEN)
    assert [tree.leaf_reward(leaf.id) for leaf in tree.leaves] == [0.0, 1.0, 0.0, 1.0, 1.0, 0.5]
    # V(1) = (1 + 0 + 1) / 3; V(0) = (V(1) + V(2)) / 2 = (2/3 + 0) / 2 = 1/3, not the flat mean of
    # its four leaves (0, 1, 0, 1), 1/2, which over-weights the child with more leaves;
    # V(6) = (1.0 + 0.5) / 2.
    expected = [1 / 3, 2 / 3, 0.0, 1.0, 0.0, 1.0, 0.75, 1.0, 0.5]
    assert node_values(tree) == pytest.approx(expected)
    assert assign_values(tree) == pytest.approx(expected)
    assert [n.value for n in tree.nodes] == pytest.approx(expected)


def test_advantages_use_the_other_siblings_as_baseline():
    tree = build(UNEVEN)
    expected = [
        1 / 3 - 0.75,  # 0: the other root is 6 → -5/12
        2 / 3 - 0.0,  # 1: vs 2
        0.0 - 2 / 3,  # 2: vs 1
        1.0 - 0.5,  # 3: vs 4 and 5, mean (0 + 1) / 2
        0.0 - 1.0,  # 4: vs 3 and 5
        1.0 - 0.5,  # 5: vs 3 and 4
        0.75 - 1 / 3,  # 6: vs 0 → +5/12
        1.0 - 0.5,  # 7: vs 8
        0.5 - 1.0,  # 8: vs 7
    ]
    assert turn_advantages(tree) == pytest.approx(expected)
    assert turn_advantages(tree, baseline="mean") == pytest.approx(expected)


def test_median_baseline():
    # One root with three leaf children of returns 0, 1, 1: each is compared with the median of
    # the other two; the single root has nothing to compare with.
    fan = build([(None, 0.0, 1), (0, 0.0, 1), (0, 1.0, 1), (0, 1.0, 1)])
    assert turn_advantages(fan, baseline="median") == pytest.approx([0.0, 0.0 - 1.0, 1.0 - 0.5, 1.0 - 0.5])


def test_cut_leaves_have_no_value_and_single_children_inherit():
    tree = build(UNEVEN)
    tree.leaf_errors[2] = "budget"
    assert usable_returns(tree) == {3: 1.0, 4: 0.0, 5: 1.0, 7: 1.0, 8: 0.5}
    # Leaf 2 has no outcome: V(2) is None and V(0) = V(1) = 2/3. Node 1 is left as node 0's only
    # usable child, so it inherits node 0's advantage 2/3 − 0.75 = −1/12.
    assert node_values(tree) == pytest.approx([2 / 3, 2 / 3, None, 1.0, 0.0, 1.0, 0.75, 1.0, 0.5])
    assert turn_advantages(tree) == pytest.approx([-1 / 12, -1 / 12, 0.0, 0.5, -1.0, 0.5, 1 / 12, 0.5, -0.5])


def test_a_single_episode_gives_zero_advantages_and_no_saving():
    tree = build([(None, 0.0, 3), (0, 0.0, 3), (1, 1.0, 3)])
    assert node_values(tree) == [1.0, 1.0, 1.0]
    assert turn_advantages(tree) == [0.0, 0.0, 0.0]
    assert prefix_sharing_saving(tree) == 0.0 and prefix_sharing_saving(tree, "tokens") == 0.0


def test_prefix_sharing_saving_by_hand():
    tree = build(UNEVEN)
    # Steps: 9 nodes; as linear episodes the six leaves' paths are 2 + 3 + 3 + 3 + 2 + 2 = 15 steps.
    assert prefix_sharing_saving(tree) == pytest.approx(1 - 9 / 15)
    # Tokens: the nodes hold 10+4+6+2+2+2+8+1+3 = 38; the paths 16 (0,2) + 3 × 16 (0,1,x)
    # + 9 (6,7) + 11 (6,8) = 84.
    assert prefix_sharing_saving(tree, "tokens") == pytest.approx(1 - 38 / 84)
    # Three leaves below one shared 4-step prefix: 7 nodes instead of 3 × 5 = 15 steps.
    fan = build([(None, 0, 1), (0, 0, 1), (1, 0, 1), (2, 0, 1), (3, 0, 1), (3, 0, 1), (3, 0, 1)])
    assert prefix_sharing_saving(fan) == pytest.approx(1 - 7 / 15)


def test_empty_trees_and_bad_arguments():
    empty = build([])
    assert node_values(empty) == [] and turn_advantages(empty) == [] and prefix_sharing_saving(empty) == 0.0
    with pytest.raises(ValueError, match=r"baseline must be one of \('mean', 'median'\), got 'siblings'"):
        turn_advantages(build(UNEVEN), baseline="siblings")
    with pytest.raises(ValueError, match="weight"):
        prefix_sharing_saving(build(UNEVEN), weight="seconds")
