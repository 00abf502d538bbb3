"""The memory bank: utility math on hand-computed numbers, retrieval into prompt text, usage credit (also from concurrent writers), merging, pruning, capacity, and corrupted entries."""

import threading

import pytest

from agentgym.memory.bank import (
    MEMORY_BEGIN,
    CorruptEntryError,
    MemoryBank,
    Retrieval,
    Skill,
    jaccard,
    merge_skill_data,
    procedures_in_prompt,
    refined_utility,
    split_prompt,
)
from agentgym.memory.induction import EpisodeRecord, SkillDraft
from agentgym.memory.store import Entry
from tests.helpers.memory_policies import GOOD, HARMFUL

ENV = "keychain"
TASK = "Find the number stored under cloud. Use lookup(key); an entry may point to another key. Then submit(answer)."


def test_refined_utility_is_the_shrinkage_mean():
    assert refined_utility(0.5, 4, 0.0, 1) == pytest.approx(0.4)  # (4·0.5 + 0) / 5
    assert refined_utility(0.5, 4, -3.0, 6) == pytest.approx(-0.1)  # (2 − 3) / 10
    assert refined_utility(0.0, 0, 1.5, 3) == pytest.approx(0.5)  # no prior: the mean advantage
    assert refined_utility(0.7, 0, 0.0, 0) == 0.0  # no evidence at all


def test_jaccard():
    assert jaccard(["a", "b", "c"], ["a", "c"]) == pytest.approx(2 / 3)
    assert jaccard([], []) == 1.0 and jaccard(["a"], ["b"]) == 0.0


def test_merge_sums_evidence_keeps_the_prior_and_bumps_the_version():
    keep = {
        "uses": 2,
        "successes": 1,
        "reward_sum": 1.0,
        "advantage_sum": 0.5,
        "advantage_n": 2,
        "sources": ["e1"],
        "version": 1,
        "validation": {"gain": 0.4, "n": 8},
    }
    drop = {
        "uses": 3,
        "successes": 3,
        "reward_sum": 3.0,
        "advantage_sum": 1.5,
        "advantage_n": 3,
        "sources": ["e1", "e2"],
        "version": 4,
        "validation": {"gain": 0.9, "n": 2},
    }
    merged = merge_skill_data(keep, drop, 7)
    assert (merged["uses"], merged["successes"], merged["advantage_n"]) == (5, 4, 5)
    assert merged["sources"] == ["e1", "e2"] and merged["merged"] == [7] and merged["version"] == 2
    assert merged["utility"] == pytest.approx((8 * 0.4 + 2.0) / 13)


def draft(steps=GOOD, name="solve", family="train") -> SkillDraft:
    return SkillDraft(name, "train tasks like: Find the number stored under …", list(steps), env=ENV, family=family)


def episode(reward: float, skills=(), task_id="train-1") -> EpisodeRecord:
    return EpisodeRecord(env=ENV, task_id=task_id, task=TASK, reward=reward, success=reward > 0, skills=list(skills))


@pytest.fixture
def bank(tmp_path):
    bank = MemoryBank(tmp_path / "memory.db")
    yield bank
    bank.close()


def test_retrieval_renders_a_block_a_follower_can_read(bank):
    good = bank.add_skill(draft(), validation={"gain": 0.5, "n": 10, "mean_without": 0.2})
    bank.add_episode(episode(1.0))
    retrieval = bank.retrieve(TASK, env=ENV)
    assert retrieval.skill_ids == [good] and len(retrieval.episodes) == 1
    text = retrieval.render() + TASK
    assert text.startswith(MEMORY_BEGIN) and f"[skill {good}] solve (utility +0.50, used 0 times)" in text
    assert split_prompt(text)[1] == TASK and procedures_in_prompt(text) == [GOOD]
    assert bank.retrieve(TASK, env="another env").render() == ""  # nothing retrieved: no block at all
    assert split_prompt(TASK) == ("", TASK) and procedures_in_prompt(TASK) == []


def test_retrieval_filters_by_utility_and_shows_candidates_last(bank):
    bank.add_skill(draft(HARMFUL, "guess"), validation={"gain": -0.5, "n": 10})
    good = bank.add_skill(draft(), validation={"gain": 0.5, "n": 10})
    retrieval = bank.retrieve(TASK, env=ENV, min_utility=0.0, k_episodes=0)
    assert retrieval.skill_ids == [good]
    retrieval.extra = [draft(HARMFUL, "candidate")]
    assert procedures_in_prompt(retrieval.render()) == [GOOD, HARMFUL]


def test_usage_credit_uses_the_family_baseline(bank):
    skill = bank.add_skill(draft(), validation={"gain": 0.5, "n": 4, "mean_without": 0.0})
    for reward in (0.0, 1.0):  # the family's episodes without the skill: baseline 0.5
        bank.add_episode(episode(reward))
    bank.add_episode(episode(0.0, task_id="other-1"))  # another family: not in the baseline
    bank.record_use([skill], episode(1.0, [skill]))
    data = bank.store.get(skill).data
    assert (data["uses"], data["successes"], data["advantage_n"]) == (1, 1, 1)
    assert data["advantage_sum"] == pytest.approx(0.5)
    assert data["utility"] == pytest.approx((4 * 0.5 + 0.5) / 5)


def test_without_a_baseline_the_validation_mean_without_is_used(bank):
    skill = bank.add_skill(draft(), validation={"gain": 0.5, "n": 1, "mean_without": 0.25})
    bank.record_use([skill], episode(0.0, [skill]))
    data = bank.store.get(skill).data
    assert data["advantage_sum"] == pytest.approx(-0.25) and data["utility"] == pytest.approx(0.125)
    unvalidated = bank.add_skill(draft(name="raw"))
    bank.record_use([unvalidated], episode(1.0, [unvalidated]))
    data = bank.store.get(unvalidated).data
    assert data["uses"] == 1 and data["advantage_n"] == 0 and data["utility"] == 0.0  # no baseline: counted, not scored


def test_credit_to_a_deleted_skill_is_skipped(bank):
    skill = bank.add_skill(draft())
    bank.store.delete(skill)
    bank.record_use([skill], episode(1.0, [skill]))  # no error


def test_concurrent_workers_never_lose_a_use(tmp_path):
    path = tmp_path / "memory.db"
    skill = MemoryBank(path).add_skill(draft())

    def worker():
        own = MemoryBank(path)  # as separate workers would: their own connections
        for _ in range(10):
            own.record_use([skill], episode(1.0, [skill]))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    data = MemoryBank(path).store.get(skill).data
    assert data["uses"] == 40 and data["successes"] == 40


def test_near_duplicates_merge_into_the_more_useful(bank):
    four = [*GOOD, "lookup(key=<last word in the last observation>)", 'submit(answer="1")']
    best = bank.add_skill(draft(four, "a"), validation={"gain": 0.6, "n": 5})
    twin = bank.add_skill(draft(list(reversed(four)), "b"), validation={"gain": 0.1, "n": 5})
    other_family = bank.add_skill(draft(four, "c", family="other"))
    different = bank.add_skill(draft(GOOD, "d"))  # Jaccard 2/4 with the others
    assert bank.merge_duplicates(0.8) == [(best, twin)]
    assert {s.id for s in bank.skills()} == {best, other_family, different}
    merged = bank.store.get(best).data
    assert merged["version"] == 2 and merged["merged"] == [twin]


def test_prune_and_capacity(bank):
    used_bad = bank.add_skill(draft(HARMFUL, "bad"))
    new_bad = bank.add_skill(draft(HARMFUL, "new"))
    good = bank.add_skill(draft(GOOD, "good"), validation={"gain": 0.5, "n": 10})
    episodes = []
    for _ in range(5):
        episodes.append(bank.add_episode(episode(1.0)))  # a baseline of 1.0: every failure is an advantage of −1
        bank.record_use([used_bad], episode(0.0, [used_bad]))
    assert bank.store.get(used_bad).data["utility"] == -1.0
    bank.store.update_data(new_bad, lambda d: {**d, "uses": 1, "utility": -1.0})
    assert bank.prune(min_uses=5, below=0.0) == [used_bad]  # the new one has not been used enough
    assert bank.enforce_capacity(max_skills=1, max_episodes=3) == [new_bad, *episodes[:2]]  # lowest utility, oldest
    assert [s.id for s in bank.skills()] == [good]
    assert bank.store.count(kind="episode") == 3


def test_refine_reports_each_step(bank):
    bank.add_skill(draft())
    bank.add_skill(draft(name="same"))
    report = bank.refine(max_skills=5)
    assert len(report["merged"]) == 1 and report["pruned"] == [] and report["evicted"] == []


def test_corrupted_skill_data_is_skipped_with_a_clear_error(bank, caplog):
    bad = bank.store.add(
        Entry(
            kind="skill", text="Find the number stored under x", title="broken", env=ENV, data={"steps": "not a list"}
        )
    )
    wrong_types = bank.store.add(
        Entry(kind="skill", text="Find the number", title="typed", env=ENV, data={"steps": [], "uses": "many"})
    )
    good = bank.add_skill(draft())
    with pytest.raises(CorruptEntryError, match=f"skill {bad} has no usable procedure"):
        Skill.from_entry(bank.store.get(bad))
    with pytest.raises(CorruptEntryError, match=f"skill {wrong_types} has corrupted data"):
        Skill.from_entry(bank.store.get(wrong_types))
    assert [s.id for s in bank.skills()] == [good]
    assert bank.retrieve(TASK, env=ENV).skill_ids == [good]
    assert "skipped" in caplog.text
    bank.store.add(Entry(kind="episode", text="x", env=ENV, family="train", data={}))
    assert bank.episode_records() == []


def test_empty_bank(bank):
    assert bank.skills() == [] and bank.retrieve(TASK) == Retrieval()
    assert bank.refine() == {"merged": [], "pruned": [], "evicted": []}
