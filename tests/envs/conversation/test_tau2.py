"""τ²-bench as envs: rewards equal τ²'s own evaluate_simulation on reference, truncated and mutated conversations; forks equal replays; the user side steers and forks."""

import copy
import json
import pickle

import gymnasium
import pytest
from tau2.environment.toolkit import ToolType

from agentgym.envs.conversation.tau2 import (
    _TABLE_BASES,
    Tau2Env,
    _fresh_environment,
    tau2_environment,
    tau2_reference_replies,
    tau2_tasks,
)
from agentgym.envs.user import ScriptedUser, UserTurn
from agentgym.task import call_text
from tests.helpers.tau2 import play, tau2_evaluate_simulation

EVALUATE = tau2_evaluate_simulation()


def shifted(text):
    """``text`` with every digit changed (information told wrong)."""
    return "".join(str((int(ch) + 1) % 10) if ch.isdigit() else ch for ch in text)


def variants(domain, task):
    """The conversations compared with τ²'s evaluator: reference, truncated, wrong argument, extra write, wrong information told."""
    reference = tau2_reference_replies(task)
    criteria = task.evaluation_criteria
    toolkit = tau2_environment(domain)().tools
    writes = [
        a for a in criteria.actions or [] if a.requestor == "assistant" and toolkit.tool_type(a.name) == ToolType.WRITE
    ]
    # Cut in half, then closing messages until the scripted user has played out its script and stops.
    truncated = reference[: max(1, len(reference) // 2)] + ["That is all."] * len(reference)
    out = {"reference": reference, "truncated": truncated}
    if writes:
        last = writes[-1]
        mutated = copy.deepcopy(last.arguments)
        key = next(iter(mutated), None)
        if key is not None:
            mutated[key] = shifted(mutated[key]) if isinstance(mutated[key], str) else "0"
            index = reference.index(call_text(last.name, last.arguments))
            out["wrong-argument"] = reference[:index] + [call_text(last.name, mutated)] + reference[index + 1 :]
        out["extra-write"] = reference[:-1] + [call_text(last.name, last.arguments), reference[-1]]
    if criteria.communicate_info:
        out["wrong-info"] = reference[:-1] + [
            "All done. " + " ".join(shifted(info) for info in criteria.communicate_info)
        ]
    return out


# A few tasks per domain in the default run (airline's and retail's grades hash their databases: about a
# second each); the sweep (`make test-sweeps`) covers every task.
SAMPLE = {"retail": ["2"], "airline": ["7"], "telecom": None}


def sampled(domain, every=False):
    ids = list(tau2_tasks(domain))
    if every:
        return ids
    return SAMPLE[domain] or ids[::6]


@pytest.mark.parametrize("domain", ["retail", "airline", "telecom"])
def test_rewards_equal_tau2_evaluator(domain):
    check_fidelity(domain, sampled(domain))


@pytest.mark.sweep
@pytest.mark.parametrize("domain", ["retail", "airline", "telecom"])
def test_rewards_equal_tau2_evaluator_every_task(domain):
    check_fidelity(domain, sampled(domain, every=True))


def check_fidelity(domain, task_ids):
    env = Tau2Env(domain)
    seen = {"reference": 0, "failures": 0}
    try:
        for task_id in task_ids:
            task = env.tau2_task(task_id)
            for name, replies in variants(domain, task).items():
                reward, terminated, info = play(env, task_id, replies)
                assert terminated, (task_id, name)
                assert reward == EVALUATE(env.unwrapped), (task_id, name, info.get("grade"))
                if name == "reference":
                    assert reward == 1.0, (task_id, info.get("grade"))
                    seen["reference"] += 1
                seen["failures"] += reward == 0.0
    finally:
        env.close()
    # The mutants are real failures too, not only the reference's successes (some telecom tasks
    # survive a cut conversation: their assertions hold once the first fixes are made).
    assert seen["reference"] == len(task_ids) and seen["failures"] >= len(task_ids) // 2


def test_grade_names_the_components_scored():
    env = gymnasium.make("agentgym/conversation.tau2-retail-v0")
    task = env.unwrapped.tau2_task("0")
    _, _, info = play(env, "0", tau2_reference_replies(task))
    assert info["grade"]["scored"] == ["DB", "COMMUNICATE"]
    assert info["grade"]["breakdown"] == {"DB": 1.0, "COMMUNICATE": 1.0}
    assert info["grade"]["termination"] == "user_stop"
    env.close()


def test_splits_and_tasks_come_from_tau2():
    assert len(Tau2Env("airline").task_ids()) == 50
    assert (len(Tau2Env("retail", split="train").task_ids()), len(Tau2Env("retail", split="test").task_ids())) == (
        74,
        40,
    )
    assert len(Tau2Env("telecom", split="test").task_ids()) == 40
    with pytest.raises(ValueError, match="unknown split"):
        Tau2Env("retail", split="dev")
    with pytest.raises(ValueError, match="unknown τ² domain"):
        Tau2Env("banking")


def test_telecom_user_acts_on_their_own_device():
    """Dual control: the user's tool calls run in τ²'s environment (the agent does not see their results)."""
    env = Tau2Env("telecom")
    task_id = next(
        t
        for t in env.task_ids()
        if any(a.requestor == "user" for a in env.tau2_task(t).evaluation_criteria.actions or [])
    )
    env.reset(options={"task_id": task_id})
    user_calls_before = sum(1 for m in env.messages if m.role == "user" and m.tool_calls)
    observation, *_ = env.step("Please do the next step on your device.")
    user_results = [m for m in env.messages if m.role == "tool" and m.requestor == "user"]
    assert user_calls_before == 0 and user_results and observation["text"] == "user: I have done that."
    env.close()


# ---------------------------------------------------------------------- branching
@pytest.mark.parametrize("domain,task_id", [("retail", "5"), ("airline", "7"), ("telecom", None)])
def test_fork_mid_episode_then_continue_equals_replay(domain, task_id):
    env = Tau2Env(domain)
    task_id = task_id or next(t for t in env.task_ids() if len(tau2_reference_replies(env.tau2_task(t))) >= 4)
    replies = tau2_reference_replies(env.tau2_task(task_id))
    head, tail = replies[:2], replies[2:]
    env.reset(options={"task_id": task_id})
    for reply in head:
        env.step(reply)
    with env.snapshot() as snapshot:
        fork = env.fork(snapshot)
        imported = env.fork(env.import_snapshot(env.export_snapshot(snapshot)))
    replay = Tau2Env(domain)
    replay.reset(options={"task_id": task_id})
    for reply in head:
        replay.step(reply)
    branches = (fork, imported, replay, env)
    try:
        runs = [[branch.step(reply) for reply in tail] for branch in branches]
        assert runs[0] == runs[1] == runs[2] == runs[3]
        # τ²'s messages carry the wall-clock time they were made at; everything else is equal.
        assert [m.model_dump(exclude={"timestamp"}) for m in fork.messages] == [
            m.model_dump(exclude={"timestamp"}) for m in replay.messages
        ]
        assert fork.environment.get_db_hash() == replay.environment.get_db_hash()
        assert runs[0][-1][1] == 1.0
    finally:
        for branch in branches:
            branch.close()


ACCESSORS = {
    "item": lambda table, key: table[key],
    "get": lambda table, key: table.get(key),
    "values": lambda table, key: next(r for r in table.values() if r is table[key]),
    "items": lambda table, key: dict(table.items())[key],
    "dict": lambda table, key: dict(table)[key],
    "unpack": lambda table, key: {**table}[key],
    "copy": lambda table, key: table.copy()[key],
    "setdefault": lambda table, key: table.setdefault(key, None),
}


@pytest.mark.parametrize("accessor", ACCESSORS)
def test_database_records_are_copied_before_tau2s_code_can_change_them(accessor):
    """Every table shares one parsed database: a record changed through any accessor changes this environment only."""
    environment, other = _fresh_environment("retail"), _fresh_environment("retail")
    pristine = tau2_environment("retail")().get_db_hash()
    order_id = next(iter(environment.tools.db.orders.keys()))
    record = ACCESSORS[accessor](environment.tools.db.orders, order_id)
    record.status = "hacked"
    assert environment.tools.db.orders[order_id].status == "hacked"
    assert environment.get_db_hash() != pristine
    assert other.get_db_hash() == _fresh_environment("retail").get_db_hash() == pristine
    assert other.tools.db.orders[order_id].status != "hacked"


def test_snapshots_carry_only_the_records_an_episode_changed():
    environment = _fresh_environment("retail")
    pristine = environment.get_db_hash()
    orders = environment.tools.db.orders
    whole = len(pickle.dumps(tau2_environment("retail")()))  # τ²'s own environment: the whole database
    for _ in orders.items():  # read every record (as τ²'s lookups by e-mail do): nothing to carry
        pass
    read_only = len(pickle.dumps(environment))
    first, second = list(orders.keys())[:2]
    orders[first].status = "cancelled"
    moved = orders.pop(second)  # deleted and added again: the end of the table, as τ²'s hash dumps it
    orders[second] = moved
    orders["#new"] = copy.deepcopy(moved)
    data = pickle.dumps(environment)
    copy_ = pickle.loads(data)
    assert read_only < whole / 50 and len(data) < read_only + 30_000  # three records and the table's key order
    assert list(copy_.tools.db.orders.keys()) == list(orders.keys())
    assert copy_.get_db_hash() == environment.get_db_hash() != pristine
    assert copy_.tools.db.orders[first].status == "cancelled"


@pytest.mark.parametrize("domain", ["retail", "airline"])
def test_tau2s_reads_leave_the_shared_database_as_parsed(domain):
    """During τ²'s reads the tables lend the shared records uncopied: every read of every task's reference leaves each record as it was parsed."""
    env = Tau2Env(domain)
    reads = 0
    for task_id in env.task_ids():
        env.reset(options={"task_id": task_id})
        for action in env.tau2_task().evaluation_criteria.actions or []:
            if action.requestor == "assistant" and action.name in env._read_tools:
                env.step(call_text(action.name, action.arguments))
                reads += 1
    env.close()
    bases = [base for (name, _), base in _TABLE_BASES.items() if name == domain]
    assert reads > 50 and len(bases) == 3
    for base in bases:
        assert all(pickle.dumps(r, pickle.HIGHEST_PROTOCOL) == base.pickled[k] for k, r in base.records.items())


def test_forks_branch_on_a_steered_user_reply():
    """Snapshot before the agent's message, steer the fork's user, step the same message: the replies differ, the original is untouched."""
    env = Tau2Env("retail", tasks=["0"])
    env.reset(options={"task_id": "0"})
    with env.snapshot() as junction:
        fork = env.fork(junction)
    fork.steer_user(reply="Actually, I want a refund instead.", directive="be impatient")
    steered, *_ = fork.step("Could you tell me your name and zip code?")
    plain, *_ = env.step("Could you tell me your name and zip code?")
    assert steered["text"] == "user: Actually, I want a refund instead."
    assert plain["text"] == "user: ###STOP###"  # the scripted user's script ran out
    assert fork.user_state.directives == ["be impatient"] and env.user_state.directives == []
    assert "be impatient" in fork.user_state.instructions()
    # The steering is state: a fork of the fork carries the directive.
    with fork.snapshot() as snapshot:
        grandchild = fork.fork(snapshot)
    assert grandchild.user_state == fork.user_state
    for branch in (fork, grandchild, env):
        branch.close()


class EchoUser(ScriptedUser):
    """A user that answers with what it saw last (checks the user's view of the conversation)."""

    def _respond(self, state, conversation):
        if not conversation or state.turns == 0:
            return UserTurn("I need help with my order.")
        return UserTurn("you said: " + conversation[-1]["content"] + (" ###STOP###" if state.turns >= 2 else ""))


def test_user_sees_the_conversation_with_roles_flipped():
    env = Tau2Env("retail", user=EchoUser())
    env.reset(options={"task_id": "0"})
    env.step(call_text("find_user_id_by_name_zip", {"first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"}))
    observation, *_ = env.step("What is your order number?")
    assert observation["text"] == "user: you said: What is your order number?"
    view = env._user_view()
    assert [m["role"] for m in view] == ["user", "assistant", "user", "assistant"]  # no agent tool traffic
    _, reward, terminated, _, info = env.step("Anything else?")
    assert terminated and reward == 0.0 and info["grade"]["termination"] == "user_stop"
    env.close()


def test_agent_stop_token_ends_the_conversation():
    env = Tau2Env("retail")
    env.reset(options={"task_id": "0"})
    _, reward, terminated, _, info = env.step("I cannot help. ###STOP###")
    assert terminated and reward == 0.0 and info["grade"]["termination"] == "agent_stop"
    env.close()


def test_tool_messages_are_the_ones_tau2_replays():
    """τ²'s evaluator replays the recorded tool calls into a fresh environment and raises if a response differs."""
    env = Tau2Env("airline")
    task = env.tau2_task("0")
    play(env, "0", tau2_reference_replies(task))
    fresh = tau2_environment("airline")()
    fresh.set_state(initialization_data=None, initialization_actions=None, message_history=env.messages)
    assert fresh.get_db_hash() == env.environment.get_db_hash()
    assert json.loads(env.messages[-1].model_dump_json())["role"] == "user"
    env.close()


# ---------------------------------------------------------------------- eval
def test_agentgym_eval_runs_a_tau2_suite_with_pass_hat_k(tmp_path, capsys):
    """The oracle (the tasks' reference replies, against the scripted user) through `agentgym eval`: pass@k and pass^k, per split."""
    from agentgym.cli import main

    out = tmp_path / "run"
    main(
        [
            "eval",
            "--suite",
            "tau2-telecom",
            "--policy",
            "oracle",
            "-k",
            "2",
            "--tasks",
            "*airplane_mode_on|data_mode_off*",
            "--out",
            str(out),
        ]
    )
    summary = json.loads((out / "summary.json").read_text())
    metrics = summary["metrics"]
    assert metrics["success_rate"] == 1.0 and metrics["pass_hat_k"]["2"] == 1.0 and metrics["pass_at_k"]["2"] == 1.0
    assert metrics["pass_hat_k_ci95"]["2"] == [1.0, 1.0]
    assert set(summary["by_category"]) <= {"train", "test"}
    assert "pass^2" in capsys.readouterr().out


# ---------------------------------------------------------------------- NL assertions
def test_nl_assertion_judge_prompt_is_tau2s():
    import re
    from pathlib import Path

    import tau2.evaluator

    from agentgym.envs.conversation import tau2 as ours

    source = (Path(tau2.evaluator.__file__).parent / "evaluator_nl_assertions.py").read_text()
    assert re.search(r'system_prompt = """(.*?)"""', source, re.S).group(1) == ours._JUDGE_SYSTEM_PROMPT
    assert re.search(r'user_prompt = f"""(.*?)"""', source, re.S).group(1) == ours._JUDGE_USER_PROMPT


@pytest.mark.parametrize(
    "reply, reward",
    [
        (
            '{"results": [{"expectedOutcome": "The agent greets the user.", "reasoning": "yes", "metExpectation": true}]}',
            1.0,
        ),
        (
            '{"results": [{"expectedOutcome": "The agent greets the user.", "reasoning": "no", "metExpectation": false}]}',
            0.0,
        ),
        ('{"results": []}', 0.0),  # τ² would accept no results at all; a reward needs every assertion met
        ('{"results": [{"expectedOutcome": "something else", "reasoning": "", "metExpectation": true}]}', 0.0),
        ("All expectations are met.", 0.0),
        (None, None),  # no judge: the component is reported, not scored
    ],
)
def test_nl_assertions_are_scored_by_the_judge_only_on_evidence(reply, reward):
    from tau2.data_model.tasks import RewardType

    seen = []

    def judge(messages):
        seen.append(messages)
        return reply

    env = Tau2Env("retail", judge=judge if reply is not None else None)
    task = env.tau2_task("0").model_copy(deep=True)
    task.evaluation_criteria.nl_assertions = ["The agent greets the user."]
    task.evaluation_criteria.reward_basis = [*task.evaluation_criteria.reward_basis, RewardType.NL_ASSERTION]
    env._tau2_tasks = {**env._tau2_tasks, "0": task}  # a task with an NL assertion (the base sets have none)
    got, _, info = play(env, "0", tau2_reference_replies(task))
    if reply is None:
        assert got == 1.0 and info["grade"]["not_scored"] == ["NL_ASSERTION"] and not seen
    else:
        assert got == reward and info["grade"]["breakdown"]["NL_ASSERTION"] == reward
        assert "expectedOutcomes:" in seen[0][1]["content"] and "user: " in seen[0][1]["content"]
    env.close()
