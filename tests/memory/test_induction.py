"""Induction: the step language (abstract, parse, resolve, follow), rule-based summaries, the rule-based distiller's contrast, and the policy summarizer's tolerance of bad output."""

import json

import pytest

from agentgym.envs.tool.keychain import KeyChainEnv, demonstration, make_task
from agentgym.memory.induction import (
    EpisodeRecord,
    PolicySummarizer,
    RuleBasedDistiller,
    abstract_value,
    episode_record,
    family_of,
    follow,
    follow_any,
    parse_step,
    resolve_step,
    summarize_episode,
)
from agentgym.rollout.agent import Agent, AgentConfig
from agentgym.rollout.policy import Completion, Policy
from tests.helpers.memory_policies import GOOD

TASK = "Find the number stored under cloud. Use lookup(key); an entry may point to another key. Then submit(answer)."


@pytest.mark.parametrize(
    "task_id, family",
    [
        ("train-12", "train"),
        ("HumanEval/3", "HumanEval"),
        ("multi_turn_base_7", "multi_turn_base"),
        ("plain", "plain"),
        ("42", "42"),
    ],
)
def test_family_is_the_id_without_its_number(task_id, family):
    assert family_of(task_id) == family


def test_values_become_slots_that_read_them_back():
    assert abstract_value("cloud", TASK, "") == '<word after "under" in the task>'
    assert abstract_value("amber", TASK, "cloud: see amber") == "<last word in the last observation>"
    # position first: the anchor "amber" is itself task-specific
    assert abstract_value("42", TASK, "amber: 42") == "<last number in the last observation>"
    assert abstract_value("57", TASK, "amber: 42") == '"57"'  # a guess stays literal
    assert abstract_value("see", TASK, "cloud: see amber") == '<word after "cloud" in the last observation>'


def test_steps_parse_and_resolve_against_a_new_context():
    line = 'lookup(key=<word after "under" in the task>)'
    assert parse_step(line) == ("lookup", [("key", '<word after "under" in the task>')])
    assert parse_step("2. submit()") == ("submit", [])
    assert parse_step("not a step") is None and parse_step("f(x y)") is None
    assert resolve_step(line, TASK.replace("cloud", "frost"), "") == {"name": "lookup", "arguments": {"key": "frost"}}
    assert resolve_step('submit(answer="11")', TASK, "") == {"name": "submit", "arguments": {"answer": "11"}}
    assert resolve_step("guess(n=3, exact=true)", TASK, "") == {"name": "guess", "arguments": {"n": 3, "exact": True}}
    assert resolve_step("submit(answer=<last number in the last observation>)", TASK, "cloud: see amber") is None


def test_follow_skips_steps_that_do_not_resolve():
    two_hop = [GOOD[0], 'lookup(key=<word after "see" in the last observation>)', GOOD[1]]
    assert follow(two_hop, TASK, [""]) == {"name": "lookup", "arguments": {"key": "cloud"}}
    assert follow(two_hop, TASK, ["", "cloud: see amber"])["arguments"] == {"key": "amber"}
    assert follow(two_hop, TASK, ["", "cloud: see amber", "amber: 42"]) == {
        "name": "submit",
        "arguments": {"answer": "42"},
    }
    # one hop: the second lookup does not resolve and is skipped
    assert follow(two_hop, TASK, ["", "cloud: 42"]) == {"name": "submit", "arguments": {"answer": "42"}}
    assert follow(two_hop, TASK, ["", "cloud: 42", "Submitted."]) is None  # used up


def test_follow_any_falls_through_to_the_next_procedure():
    two_hop = [GOOD[0], "lookup(key=<last word in the last observation>)", GOOD[1]]
    assert follow_any([GOOD, two_hop], TASK, [""]) == {"name": "lookup", "arguments": {"key": "cloud"}}
    assert follow_any([GOOD, two_hop], TASK, ["", "cloud: 42"])["name"] == "submit"  # the first still applies
    # GOOD cannot submit after a pointer: the two-hop procedure, replayed from the start, takes over
    assert follow_any([GOOD, two_hop], TASK, ["", "cloud: see amber"])["arguments"] == {"key": "amber"}
    assert follow_any([], TASK, [""]) is None


def record(task_id: str, replies: list[str], success: bool, truncated: bool = False) -> EpisodeRecord:
    """Play ``replies`` on KeyChain and keep what a MemoryWrapper would."""
    from agentgym.memory.induction import step_entry

    env = KeyChainEnv(split=family_of(task_id))
    observation, _ = env.reset(options={"task_id": task_id})
    steps = []
    for reply in replies:
        obs, reward, _, _, info = env.step(reply)
        steps.append(step_entry(env.parse(reply).calls, obs["text"], reward, info["error"]))
    return EpisodeRecord(
        env=env.kind,
        task_id=task_id,
        task=observation["text"],
        steps=steps,
        reward=float(success),
        success=success,
        truncated=truncated,
    )


def solved(task_id: str) -> EpisodeRecord:
    return record(task_id, demonstration(make_task(task_id)), True)


def test_summary_has_task_steps_outcome_and_failure_cause():
    title, text = summarize_episode(record("train-1", ['lookup("brick")', 'submit("13")'], False))
    assert title.startswith('Find the number stored under "brick"')
    assert 'lookup(key="brick") -> brick: 42' in text and "Outcome: failure (reward 0, 2 steps)" in text
    assert 'Failure cause: the task was judged unsolved after submit(answer="13")' in text
    _, text = summarize_episode(record("train-1", ['lookup("brick")', "nonsense"], False, truncated=True))
    assert "Failure cause: the last reply was rejected" in text
    _, text = summarize_episode(solved("train-1"))
    assert "Outcome: success" in text and "Failure cause" not in text


def test_distiller_contrasts_successes_and_failures():
    one_hop = [t for t in (f"train-{i}" for i in range(40)) if make_task(t)["hops"] == 1][:3]
    two_hop = [t for t in (f"train-{i}" for i in range(40)) if make_task(t)["hops"] == 2][:2]
    records = [solved(t) for t in one_hop + two_hop]
    records.append(record(one_hop[0], ['submit("13")'], False))
    records.append(record("heldout-1", demonstration(make_task("heldout-1")), True))
    drafts = RuleBasedDistiller().distill(records)
    train = sorted((d for d in drafts if d.family == "train"), key=lambda d: -d.support)
    assert [d.support for d in train] == [3, 2]
    assert train[0].steps == GOOD
    assert train[1].steps == [GOOD[0], "lookup(key=<last word in the last observation>)", GOOD[1]]
    assert train[0].avoid == ['submit(answer="13")']  # seen only in the failure
    assert train[0].sources == one_hop and "Find the number stored under …" in train[0].when
    assert {d.family for d in drafts} == {"train", "heldout"}
    assert [d.support for d in RuleBasedDistiller(min_support=3).distill(records)] == [3]
    assert "Procedure:\n1. lookup(key=" in train[0].render()


async def test_episode_record_from_a_trajectory():
    from tests.helpers.memory_policies import Follower

    env = KeyChainEnv(max_hops=1)
    trajectory = await Agent(Follower(fallback=None), AgentConfig(system_prompt=None, native_tools=False)).run(
        env, "train-1"
    )
    rec = episode_record(trajectory, env, task=TASK)
    assert rec.success and rec.family == "train" and rec.source == trajectory.id
    assert [s["calls"][0]["name"] for s in rec.steps] == ["lookup", "submit"]


class Canned(Policy):
    def __init__(self, reply: str):
        self.reply = reply
        self.asked: list[str] = []

    async def chat(self, messages, tools, sampling):
        self.asked.append(messages[-1]["content"])
        return Completion(text=self.reply)


async def test_policy_summarizer_parses_json_skills():
    reply = "Here you go: " + json.dumps(
        {"skills": [{"name": "chase", "when": "key chains", "steps": GOOD}, {"name": "empty", "steps": []}, "junk"]}
    )
    policy = Canned(reply)
    drafts = await PolicySummarizer(policy).induce([solved("train-1"), record("train-2", ['submit("1")'], False)])
    assert [(d.name, d.steps, d.family) for d in drafts] == [("chase", GOOD, "train")]
    assert "Successful attempts:" in policy.asked[0] and 'submit(answer="1")' in policy.asked[0]


async def test_policy_summarizer_survives_unusable_output():
    assert await PolicySummarizer(Canned("I cannot do that {")).induce([solved("train-1")]) == []
    title, text = await PolicySummarizer(Canned("")).summarize(solved("train-1"))
    assert text == summarize_episode(solved("train-1"))[1]  # an empty reply falls back to the rule-based summary
    _, text = await PolicySummarizer(Canned("Looked up brick, submitted 42.")).summarize(solved("train-1"))
    assert text == "Looked up brick, submitted 42."
