"""Pre-storage validation: the paired gain and its one-sided bound on hand-computed numbers, and the matched-group procedure on KeyChain."""

import math

import pytest

from agentgym.envs.tool.keychain import KeyChainEnv
from agentgym.memory.bank import MemoryBank
from agentgym.memory.induction import SkillDraft
from agentgym.memory.validation import paired_gain, validate_candidate
from agentgym.rollout.agent import Agent, AgentConfig
from agentgym.rollout.runner import EpisodeRequest
from tests.helpers.memory_policies import GOOD, HARMFUL, Follower


def test_paired_gain_matches_hand_computation():
    # d = [1, 0, 0, 1]: mean 0.5, sd = sqrt(4 * 0.25 / 3) = 0.57735, se = 0.288675,
    # t(0.9, df=3) = 1.637744 (table), lower = 0.5 - 1.637744 * 0.288675 = 0.027224.
    estimate = paired_gain([1, 1, 0, 1], [0, 1, 0, 0], confidence=0.9)
    assert estimate.gain == pytest.approx(0.5)
    assert estimate.sd == pytest.approx(math.sqrt(1 / 3))
    assert estimate.lower == pytest.approx(0.027224, abs=1e-5)
    assert (estimate.mean_with, estimate.mean_without, estimate.n) == (0.75, 0.25, 4)
    assert estimate.admits(0.0) and not estimate.admits(0.05)


def test_a_higher_confidence_widens_the_bound():
    # t(0.95, df=3) = 2.353363: lower = 0.5 - 2.353363 * 0.288675 = -0.179360.
    assert paired_gain([1, 1, 0, 1], [0, 1, 0, 0], confidence=0.95).lower == pytest.approx(-0.179360, abs=1e-5)


def test_identical_differences_give_the_gain_as_the_bound():
    estimate = paired_gain([1, 1, 1], [0, 0, 0])
    assert estimate.gain == estimate.lower == 1.0 and estimate.admits(0.5)
    harmful = paired_gain([0, 0, 0], [1, 1, 1])
    assert harmful.gain == -1.0 and not harmful.admits(0.0)


def test_one_pair_has_no_bound_and_is_never_admitted():
    estimate = paired_gain([1.0], [0.0])
    assert estimate.gain == 1.0 and estimate.lower == -math.inf and not estimate.admits(-1.0)
    assert estimate.to_dict()["lower"] is None  # JSON has no infinity


def test_bad_groups_are_clear_errors():
    with pytest.raises(ValueError, match="equal sizes"):
        paired_gain([1, 0], [1])
    with pytest.raises(ValueError, match="no pairs"):
        paired_gain([], [])
    with pytest.raises(ValueError, match="confidence"):
        paired_gain([1, 0], [0, 0], confidence=1.0)


def one_hop_env():
    return KeyChainEnv(max_hops=1, max_turns=4)


TASKS = [EpisodeRequest(f"train-{i}", seed=i) for i in range(6)]


async def test_a_useful_candidate_is_admitted_with_its_gain(tmp_path):
    bank = MemoryBank(tmp_path / "m.db")
    agent = Agent(Follower(), AgentConfig(system_prompt=None, native_tools=False))
    estimate = await validate_candidate(
        SkillDraft("solve", "keychain", GOOD), bank, agent, one_hop_env, TASKS, k_episodes=0
    )
    assert (estimate.gain, estimate.mean_with, estimate.mean_without, estimate.n) == (1.0, 1.0, 0.0, 6)
    assert estimate.admits(0.5)
    assert bank.store.count() == 0  # validation reads the bank, it never writes


async def test_a_harmful_candidate_and_a_redundant_one_are_rejected(tmp_path):
    bank = MemoryBank(tmp_path / "m.db")
    agent = Agent(Follower(fallback=None), AgentConfig(system_prompt=None, native_tools=False))  # solves alone
    harmful = await validate_candidate(SkillDraft("guess", "keychain", HARMFUL), bank, agent, one_hop_env, TASKS)
    assert harmful.gain == -1.0 and not harmful.admits(0.0)
    redundant = await validate_candidate(SkillDraft("solve", "keychain", GOOD), bank, agent, one_hop_env, TASKS)
    assert redundant.gain == 0.0 and not redundant.admits(0.0)


async def test_the_candidate_is_compared_within_the_same_retrieved_context(tmp_path):
    # The bank already holds the good skill, shown first; a candidate shown after it adds nothing.
    bank = MemoryBank(tmp_path / "m.db")
    bank.add_skill(
        SkillDraft(
            "solve", "train tasks like: Find the number stored under", GOOD, env=one_hop_env().kind, family="train"
        )
    )
    policy = Follower()
    agent = Agent(policy, AgentConfig(system_prompt=None, native_tools=False))
    estimate = await validate_candidate(SkillDraft("guess", "anything", HARMFUL), bank, agent, one_hop_env, TASKS)
    assert estimate.gain == 0.0 and estimate.mean_without == 1.0
    with_candidate = [p for p in policy.prompts if "[skill candidate] guess" in p]
    assert len(with_candidate) == len(TASKS) and all("[skill 1] solve" in p for p in policy.prompts)


async def test_admit_candidates_judges_each_against_the_growing_bank(tmp_path):
    from agentgym.memory.validation import admit_candidates

    bank = MemoryBank(tmp_path / "m.db")
    agent = Agent(Follower(), AgentConfig(system_prompt=None, native_tools=False))
    kind = one_hop_env().kind
    candidates = [
        SkillDraft(name, "train tasks like: Find the number stored under", steps, env=kind, family="train")
        for name, steps in (("solve", GOOD), ("guess", HARMFUL), ("solve again", GOOD))
    ]
    decisions = await admit_candidates(candidates, bank, agent, one_hop_env, TASKS, margin=0.2, k_episodes=0)
    assert [(d.name, e.gain, i is not None) for d, e, i in decisions] == [
        ("solve", 1.0, True),
        ("guess", 0.0, False),
        ("solve again", 0.0, False),
    ]
    [skill] = bank.skills()
    assert skill.name == "solve" and skill.utility == 1.0 and skill.validation["n"] == len(TASKS)
    assert skill.validation["method"] == "paired-t, one-sided lower bound"
