"""Values and advantages on rollout trees, and the env steps a tree's shared prefixes save: pure functions of a RolloutTree.

A node's value V(node) is the mean reward of the leaves below it (a leaf's reward is the sum of
the step rewards on its path, :meth:`RolloutTree.leaf_reward`). A turn's advantage compares its
value with a baseline at the state it was taken from:

* ``"parent"``: V(node) − V(parent), where first turns' parent is the virtual root (the reset
  state), whose value is the mean over all leaves;
* ``"siblings"``: V(node) − the mean V of its sibling group (the nodes sharing its parent, itself
  included; first turns form one group).

Every node is a turn, so these are per-turn credits for outcome-only rewards: a turn that led to
better leaves than its alternatives gets a positive advantage.
"""

from __future__ import annotations

import math

from agentgym.rollout.trajectory import RolloutTree

__all__ = ["assign_values", "node_values", "prefix_sharing_saving", "turn_advantages"]


def node_values(tree: RolloutTree) -> list[float]:
    """V(node) for every node (indexed by node id): the mean reward of the leaves below it."""
    sums = [0.0] * len(tree.nodes)
    counts = [0] * len(tree.nodes)
    # Children are always added after their parent, so one pass from the highest id up sees
    # every node's subtree complete before the node itself.
    for node in reversed(tree.nodes):
        if node.is_leaf:
            sums[node.id] += tree.leaf_reward(node.id)
            counts[node.id] += 1
        if node.parent is not None:
            sums[node.parent] += sums[node.id]
            counts[node.parent] += counts[node.id]
    return [s / c for s, c in zip(sums, counts)]


def assign_values(tree: RolloutTree) -> list[float]:
    """Write :func:`node_values` into each ``TreeNode.value``; returns them."""
    values = node_values(tree)
    for node, value in zip(tree.nodes, values):
        node.value = value
    return values


def turn_advantages(tree: RolloutTree, baseline: str = "parent") -> list[float]:
    """Each node's advantage (indexed by node id) against ``baseline``: ``"parent"`` or ``"siblings"`` (see the module docstring)."""
    if baseline not in ("parent", "siblings"):
        raise ValueError(f"baseline must be 'parent' or 'siblings', got {baseline!r}")
    if not tree.nodes:
        return []
    values = node_values(tree)
    if baseline == "parent":
        root_value = math.fsum(tree.leaf_reward(leaf.id) for leaf in tree.leaves) / len(tree.leaves)
        return [values[n.id] - (root_value if n.parent is None else values[n.parent]) for n in tree.nodes]
    root_group = [n.id for n in tree.roots]
    advantages = []
    for node in tree.nodes:
        group = root_group if node.parent is None else tree.nodes[node.parent].children
        advantages.append(values[node.id] - math.fsum(values[i] for i in group) / len(group))
    return advantages


def prefix_sharing_saving(tree: RolloutTree, weight: str = "steps") -> float:
    """The fraction of work the tree saves over running each leaf's path as its own linear episode.

    ``1 − cost(nodes) / Σ over leaves of cost(path)``: each node is one env step (``weight="steps"``)
    or its completion's token count (``weight="tokens"``), and a linear episode per leaf would
    repeat every shared prefix. 0.0 for a tree without branches (or without nodes).
    """
    if weight not in ("steps", "tokens"):
        raise ValueError(f"weight must be 'steps' or 'tokens', got {weight!r}")

    def cost(node) -> int:
        return 1 if weight == "steps" else len(node.turn.completion_ids)

    linear = sum(cost(n) for leaf in tree.leaves for n in tree.path(leaf.id))
    if linear == 0:
        return 0.0
    return 1.0 - sum(cost(n) for n in tree.nodes) / linear
