"""The trainers' math: hand-computed advantages, GAE and strict clipping, and a Monte Carlo check that the per-turn tree estimator is unbiased."""

from __future__ import annotations

import math
import random

import pytest
import torch

from agentgym.rollout.tree_values import hierarchical_values, tree_turn_advantages
from agentgym.trainers.advantages import (
    decoupled_policy_loss,
    explained_variance,
    group_advantages,
    strict_clip_policy_loss,
    turn_gae,
)

# A tree of 6 nodes: two roots; root 1 ends at once (R = 0); root 0 has children 2 and 3;
# node 2 has leaves 4 (R = 1) and 5 (R = 0); leaf 3 has R = 1.
PARENTS = [None, None, 0, 0, 2, 2]
LEAVES = {1: 0.0, 3: 1.0, 4: 1.0, 5: 0.0}


def test_hierarchical_values_average_children_not_leaves():
    values = hierarchical_values(PARENTS, LEAVES)
    # V(2) = (1 + 0) / 2; V(0) = (V(2) + V(3)) / 2 = 0.75, where the flat leaf mean would say 2/3.
    assert values == [0.75, 0.0, 0.5, 1.0, 1.0, 0.0]


def test_tree_advantages_leave_one_out_siblings():
    assert tree_turn_advantages(PARENTS, LEAVES) == [0.75, -0.75, -0.5, 0.5, 1.0, -1.0]


def test_single_child_inherits_and_single_root_gets_zero():
    # roots 0 and 1; node 2 is root 0's only child: the chain 0 → 2 is one macro-action
    assert tree_turn_advantages([None, None, 0], {1: 0.0, 2: 1.0}) == [1.0, -1.0, 1.0]
    assert tree_turn_advantages([None, 0, 0], {1: 1.0, 2: 0.0}) == [0.0, 1.0, -1.0]


def test_cut_leaves_have_no_outcome():
    # leaf 3 was cut by the budget: it is left out of the values and of node 2's sibling group
    advantages = tree_turn_advantages([None, None, 0, 0], {1: 0.0, 2: 1.0})
    assert advantages == [1.0, -1.0, 1.0, 0.0]


def test_median_baseline():
    assert tree_turn_advantages([None, None, None], {0: 0.0, 1: 1.0, 2: 1.0}, "median") == [-1.0, 0.5, 0.5]
    with pytest.raises(ValueError):
        tree_turn_advantages([None], {0: 1.0}, "mode")


def test_group_advantages():
    assert group_advantages([1, 0, 1, 1], ["a", "a", "b", "b"], scale="none") == [0.5, -0.5, 0.0, 0.0]
    scaled = group_advantages([1, 0, 1, 1], ["a", "a", "b", "b"], scale="group")
    assert scaled[0] == pytest.approx(0.5 / (math.sqrt(0.5) + 1e-4))
    assert scaled[2] == 0.0
    assert group_advantages([3, 0, 1], ["a"] * 3, baseline="median", scale="none") == [2.0, -1.0, 0.0]


def test_turn_gae():
    advantages, returns = turn_gae([0.0, 1.0], [0.5, 0.8], gamma=1.0, lam=1.0)
    assert advantages == pytest.approx([0.5, 0.2])  # λ = 1: the return minus the value
    assert returns == pytest.approx([1.0, 1.0])
    advantages, returns = turn_gae([0.0, 1.0], [0.5, 0.8], gamma=1.0, lam=0.0)
    assert advantages == pytest.approx([0.3, 0.2])  # λ = 0: one-step TD errors
    assert returns == pytest.approx([0.8, 1.0])


def test_explained_variance():
    assert explained_variance([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) == 1.0
    assert explained_variance([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]) == 0.0
    assert math.isnan(explained_variance([1.0], [1.0]))


def test_strict_clipping_drops_tokens_outside_the_band_whatever_the_sign():
    behaviour = torch.zeros(1, 4)
    logps = torch.log(torch.tensor([[0.7, 1.0, 1.3, 1.1]])).requires_grad_()
    advantages = torch.tensor([[1.0, -1.0, -1.0, 1.0]])
    mask = torch.ones(1, 4)
    loss, kept = strict_clip_policy_loss(logps, behaviour, advantages, mask, epsilon_low=0.2, epsilon_high=0.28)
    # PPO's clip would keep the gradient of tokens 0 (ratio 0.7, A > 0) and 2 (ratio 1.3, A < 0).
    assert kept.tolist() == [[0.0, 1.0, 0.0, 1.0]]
    loss.sum().backward()
    assert logps.grad[0, 0] == 0 and logps.grad[0, 2] == 0
    assert logps.grad[0, 1] == pytest.approx(1.0) and logps.grad[0, 3] == pytest.approx(-1.1)


# --- Monte Carlo: the estimator is unbiased for Q(s, a) − V(s) at every turn ---------------------
#
# A two-turn task. At the reset state the policy picks a ∈ {0, 1, 2} with P0; action 2 ends the
# episode with success probability 0.4. After a ∈ {0, 1} it picks b ∈ {0, 1} with Q1[a], and the
# episode ends with success probability R[a][b]. Trees: 3 roots, each live root forks into 2.
P0 = [0.5, 0.3, 0.2]
Q1 = [[0.7, 0.3], [0.4, 0.6]]
R = [[0.9, 0.2], [0.1, 0.5]]
R_STOP = 0.4


def _true_advantages():
    q0 = [sum(q * r for q, r in zip(Q1[a], R[a])) for a in range(2)] + [R_STOP]
    v0 = sum(p * q for p, q in zip(P0, q0))
    first = {a: q0[a] - v0 for a in range(3)}
    second = {(a, b): R[a][b] - q0[a] for a in range(2) for b in range(2)}
    return first, second


def _sample_tree(rng: random.Random):
    parents, labels, leaves = [], [], {}
    for _ in range(3):
        a = rng.choices(range(3), P0)[0]
        parents.append(None)
        labels.append((a,))
    for root in range(3):
        a = labels[root][0]
        if a == 2:
            leaves[root] = float(rng.random() < R_STOP)
            continue
        for _ in range(2):
            b = rng.choices(range(2), Q1[a])[0]
            parents.append(root)
            labels.append((a, b))
            leaves[len(parents) - 1] = float(rng.random() < R[a][b])
    return parents, labels, leaves


def _naive(parents, leaves):
    """The trap: sibling mean including the node, divided by the sibling group's std (GRPO's normalisation, per turn)."""
    values = hierarchical_values(parents, leaves)
    groups = {}
    for node, parent in enumerate(parents):
        groups.setdefault(parent, []).append(node)
    out = []
    for node, parent in enumerate(parents):
        group = [values[j] for j in groups[parent]]
        mean = sum(group) / len(group)
        std = math.sqrt(sum((v - mean) ** 2 for v in group) / max(1, len(group) - 1))
        out.append((values[node] - mean) / (std + 1e-4))
    return out


def test_monte_carlo_tree_advantages_are_unbiased():
    rng = random.Random(1234)
    first, second = _true_advantages()
    sums, squares, counts, naive = {}, {}, {}, {}
    for _ in range(12000):
        parents, labels, leaves = _sample_tree(rng)
        for label, estimate, trap in zip(labels, tree_turn_advantages(parents, leaves), _naive(parents, leaves)):
            sums[label] = sums.get(label, 0.0) + estimate
            squares[label] = squares.get(label, 0.0) + estimate**2
            counts[label] = counts.get(label, 0) + 1
            naive[label] = naive.get(label, 0.0) + trap
    truth = {**{(a,): v for a, v in first.items()}, **second}
    worst_naive = 0.0
    for label, true in truth.items():
        n = counts[label]
        mean = sums[label] / n
        stderr = math.sqrt(max(squares[label] / n - mean**2, 1e-12) / n)
        assert abs(mean - true) < 4 * stderr + 1e-3, (label, mean, true, stderr)
        worst_naive = max(worst_naive, abs(naive[label] / n - true))
    # The naive per-turn normalisation misses by far more than the sampling error.
    assert worst_naive > 0.1


def test_decoupled_policy_loss_on_hand_computed_numbers():
    # Three tokens, ε = 0.2 both sides, weights capped at 2.
    #   token 0: π_θ = π_prox            → ratio 1 (kept); w = π_prox/π_behav = e^0.5 ≈ 1.6487
    #   token 1: π_θ/π_prox = e^0.3      → ratio 1.3499 > 1.2: dropped (loss 0); w = e^-1
    #   token 2: π_θ/π_prox = e^-0.1     → ratio 0.9048 (kept); w = e^1.5 ≈ 4.48, capped to 2
    logps = torch.tensor([[-1.0, -0.7, -2.1]])
    proximal = torch.tensor([[-1.0, -1.0, -2.0]])
    behaviour = torch.tensor([[-1.5, 0.0, -3.5]])
    advantages = torch.tensor([[2.0, 1.0, -1.0]])
    mask = torch.ones(1, 3)
    loss, kept, weights = decoupled_policy_loss(logps, proximal, behaviour, advantages, mask, 0.2, 0.2, weight_cap=2.0)
    assert kept.tolist() == [[1.0, 0.0, 1.0]]
    assert weights[0].tolist() == pytest.approx([math.exp(0.5), math.exp(-1.0), 2.0])
    # −w · ratio · A: −1.6487 · 1 · 2 = −3.2974; 0; −2 · 0.9048 · (−1) = 1.8097
    assert loss[0].tolist() == pytest.approx([-2 * math.exp(0.5), 0.0, 2 * math.exp(-0.1)])
    # Uncapped, token 2 weighs e^1.5; the gradient reaches logps only (the weights carry none).
    logps.requires_grad_(True)
    loss, _, weights = decoupled_policy_loss(logps, proximal, behaviour, advantages, mask, 0.2, 0.2)
    assert weights[0, 2].item() == pytest.approx(math.exp(1.5))
    loss.sum().backward()
    # d/dlogp (−w · e^(logp − prox) · A) = −w · ratio · A on kept tokens
    assert logps.grad[0].tolist() == pytest.approx([-2 * math.exp(0.5), 0.0, math.exp(1.5) * math.exp(-0.1)])


def test_anchor_step_advantages_on_hand_computed_numbers():
    from agentgym.trainers.advantages import anchor_step_advantages

    # States s (twice), t (once), u (twice): s's returns 1 and 0 (mean 0.5), u's 2 and 4 (mean 3).
    returns, anchors = [1.0, 0.0, 0.5, 2.0, 4.0], ["s", "s", "t", "u", "u"]
    assert anchor_step_advantages(returns, anchors, scale=False) == [0.5, -0.5, 0.0, -1.0, 1.0]
    # Scaled by each group's sample std: s's is √0.5 ≈ 0.70711, u's √2 ≈ 1.41421.
    scaled = anchor_step_advantages(returns, anchors, eps=0.0)
    assert scaled == pytest.approx([0.70711, -0.70711, 0.0, -0.70711, 0.70711], abs=1e-5)
    with pytest.raises(ValueError, match="anchors"):
        anchor_step_advantages([1.0], ["s", "t"])


def test_gigpo_step_advantages_compare_turns_taken_from_the_same_observation():
    from types import SimpleNamespace

    from agentgym.rollout.trajectory import Trajectory, Turn
    from agentgym.trainers.tree_grpo import TreeGRPOTrainer

    def episode(*steps):
        turns = [
            Turn(prompt_ids=[1], completion_ids=[2], logprobs=[-0.1], prompt_mask=[0], observation=obs, reward=r)
            for obs, r in steps
        ]
        return Trajectory(task_id="t", env_id="e", turns=turns, initial_observation="start")

    # Both episodes act from "start"; both then see "door" and act from it (returns 1 and 0 there).
    a = episode(("door", 0.0), ("open", 1.0))
    b = episode(("door", 0.0), ("wall", 0.0))
    trainer = SimpleNamespace(args=SimpleNamespace(step_advantage_weight=2.0, step_gamma=0.5))
    steps = TreeGRPOTrainer._step_advantages(trainer, [a, b])
    # Returns with γ = 0.5: a (0.5, 1), b (0, 0). "start": 0.5 vs 0 → ±0.25 / std 0.35355 = ±0.7071;
    # "door": 1 vs 0 → ±0.5 / 0.70711 = ±0.7071; times ω = 2.
    assert [[round(x, 3) for x in s] for s in steps] == [[1.414, 1.414], [-1.414, -1.414]]
    trainer.args.step_advantage_weight = 0.0
    assert TreeGRPOTrainer._step_advantages(trainer, [a, b]) == [[0.0, 0.0], [0.0, 0.0]]
