"""Branching evaluation (DIVERT) on τ²-bench's real envs and evaluator: the diverse scripted user, the scripted agents, the evaluator, Monte Carlo, replay, the CLI."""

import asyncio
import json

import pytest
from tau2.environment.toolkit import ToolType

from agentgym.envs.conversation.tau2 import tau2_environment, tau2_tasks
from agentgym.envs.diverse_user import BEHAVIOURS, CONSENT, DiverseScriptedUser
from agentgym.envs.user import STOP_TOKENS, UserTurn
from agentgym.eval.branching import (
    BranchingConfig,
    _MeteredUser,
    failure_metrics,
    over_seeds,
    replay,
    run_branching,
    run_monte_carlo,
    summarize_run,
)
from agentgym.eval.harness import load_results
from agentgym.eval.scripted import IMPERFECT, READ_PREFIXES, scripted_agent_for
from agentgym.eval.suites import Suite, SuiteTask
from agentgym.rollout.trajectory import Trajectory

RETAIL = "agentgym/conversation.tau2-retail-v0"


def suite(env_id, ids):
    return Suite("t", tuple(SuiteTask(env_id, i, "c", {"tasks": list(ids)}) for i in ids))


def branch(tmp_path, flaws, ids=("0",), budget=40_000, env_id=RETAIL, seed=0):
    return asyncio.run(
        run_branching(
            suite(env_id, ids),
            scripted_agent_for(flaws),
            lambda s: DiverseScriptedUser(),
            config=BranchingConfig(token_budget=budget),
            out_dir=tmp_path,
            seed=seed,
            user_name="diverse",
        )
    )


# ---------------------------------------------------------------------- the diverse scripted user
def start(user, text="You want to return the lamp. You are Ann Lee in zip 12345.", directives=()):
    state = user.start("prompt", script=[UserTurn(text)])
    for directive in directives:
        state.steer(directive=directive)
    return state


def answering(user, directives=()):
    """A state past the opening."""
    state = start(user, directives=directives)
    state.turns = 1
    return state


def say(user, state, conversation):
    turn, state = user.reply(state, conversation)
    return turn.text, state


def test_each_behaviour_changes_the_turns_it_names_and_keeps_every_fact():
    user = DiverseScriptedUser()
    plain = "You want to return the lamp. You are Ann Lee in zip 12345."
    openings = {}
    for name, behaviour in BEHAVIOURS.items():
        text, _ = say(user, start(user, directives=[behaviour.directive]), [])
        openings[name] = text
    assert openings["reorder"] == "You are Ann Lee in zip 12345. You want to return the lamp."
    assert openings["omit"] == "You want to return the lamp."
    assert openings["rephrase"] == "Hello! I want to return the lamp. I am Ann Lee in zip 12345."
    assert openings["ambiguous"] == plain
    assert openings["impatient"].startswith(plain) and "hurry" in openings["impatient"]
    assert openings["pressure"].startswith(plain) and "exception" in openings["pressure"]
    # answers to a question: consent in every behaviour's way; without a question: stop
    question = [{"role": "assistant", "content": plain}, {"role": "user", "content": "Shall I go ahead?"}]
    assert say(user, answering(user), question)[0] == CONSENT
    assert "yes" not in say(user, answering(user, [BEHAVIOURS["rephrase"].directive]), question)[0].lower()
    statement = [{"role": "assistant", "content": plain}, {"role": "user", "content": "All done."}]
    assert say(user, answering(user), statement)[0] == STOP_TOKENS[0]


def test_omitted_details_come_at_the_next_turn_and_a_hedge_is_cleared_when_asked_again():
    user = DiverseScriptedUser()
    state = start(user, directives=[BEHAVIOURS["omit"].directive, BEHAVIOURS["ambiguous"].directive])
    opening, state = say(user, state, [])
    conversation = [{"role": "assistant", "content": opening}, {"role": "user", "content": "Shall I go ahead?"}]
    answer, state = say(user, state, conversation)
    assert answer == "Sorry, I forgot to mention: You are Ann Lee in zip 12345. Hmm, I guess so? I'm not really sure."
    conversation += [{"role": "assistant", "content": answer}, {"role": "user", "content": "Just to be sure: yes?"}]
    assert say(user, state, conversation)[0] == CONSENT  # the correction is not repeated, the hedge is cleared


def test_a_monte_carlo_user_draws_behaviours_into_its_state():
    user = DiverseScriptedUser(chance=1.0, seed=3)
    state = start(user)
    _, state = say(user, state, [])
    assert len(state.directives) == 1 and BEHAVIOURS["ambiguous"].directive not in state.directives  # no opening effect
    with pytest.raises(ValueError):
        DiverseScriptedUser(chance=2.0)


def test_read_prefixes_agree_with_tau2_tool_types():
    for domain in ("retail", "airline"):
        toolkit = tau2_environment(domain)().tools
        for tool in toolkit.get_tools():
            kind = toolkit.tool_type(tool)
            if kind in (ToolType.READ, ToolType.WRITE):  # GENERIC: calculate reads, a transfer ends the call
                assert tool.startswith(READ_PREFIXES) == (kind == ToolType.READ), tool


# ---------------------------------------------------------------------- the evaluator
def test_the_careful_agent_fails_under_no_behaviour_anywhere(tmp_path):
    """No false failures: every branch (every behaviour, at the opening and at later user turns) keeps the task's intent."""
    metrics = branch(tmp_path, (), ids=("5",), budget=90_000)
    rows = load_results(tmp_path)
    assert metrics["failures"] == 0 and metrics["episodes"] == len(rows) > 8
    assert len({name for r in rows for name in r["behaviours"]}) >= 4
    assert any(r["junction_turn"] for r in rows if r["junction"] is not None)  # branched mid-conversation too


def test_every_behaviour_from_the_start_keeps_the_careful_agent_right_and_trips_the_flawed_one(
    domain="retail", task_id="5"
):
    """Each behaviour standing from the opening (it then shapes the opening and every answer): the careful agent succeeds, the flawed one fails under some."""
    import gymnasium

    from agentgym.eval.oracles import EpisodeAgent
    from agentgym.rollout.agent import AgentConfig

    outcomes = {}
    for flaws in ((), IMPERFECT):
        for name, behaviour in [(None, None), *BEHAVIOURS.items()]:
            user = DiverseScriptedUser()
            env = gymnasium.make(f"agentgym/conversation.tau2-{domain}-v0", tasks=[task_id], user=user)
            policy = scripted_agent_for(flaws)(f"agentgym/conversation.tau2-{domain}-v0", {"tasks": [task_id]})
            agent = EpisodeAgent(policy, AgentConfig(system_prompt=None))

            async def play(env=env, agent=agent, behaviour=behaviour):
                episode = await agent.start(env, task_id)
                if behaviour is not None:  # from the first answer on (the opening already happened at reset)
                    env.unwrapped.steer_user(directive=behaviour.directive)
                while not episode.done:
                    await agent.step(episode)
                return episode.success

            outcomes[bool(flaws), name] = asyncio.run(play())
            env.close()
    assert all(outcomes[False, name] for name in [None, *BEHAVIOURS])
    assert outcomes[True, None] and not all(outcomes[True, name] for name in BEHAVIOURS)


def test_branching_finds_the_flawed_agents_failures_and_each_replays(tmp_path):
    metrics = branch(tmp_path, IMPERFECT, ids=("0", "5"), budget=40_000)
    rows = load_results(tmp_path)
    assert metrics["tasks_with_failure"] == 2 and metrics["failures"] >= 3
    assert metrics["tokens"] == sum(r["tokens"] for r in rows)
    failures = [r for r in rows if not r["success"]]
    for row in failures + [r for r in rows if r["success"]][:2]:
        success, info = replay(tmp_path, row, DiverseScriptedUser())
        assert success == row["success"], row["leaf"]
    # a branch mid-conversation pays only for its own turns, far less than its root episode
    root = next(r for r in rows if r["junction"] is None and r["task_id"] == "0")
    mid = [r for r in rows if r["task_id"] == "0" and r["junction_turn"]]
    assert mid and max(r["tokens"] for r in mid) < root["tokens"] / 2
    assert all(r["junction_file"] for r in mid)


def test_tasks_run_at_once_and_their_junctions_keep_distinct_files(tmp_path):
    """concurrency=2 over a retail and an airline task (two envs, two contexts): both start before either is done, and every branch replays from its own junction file."""
    airline = "agentgym/conversation.tau2-airline-v0"
    tasks = (SuiteTask(RETAIL, "5", "c", {"tasks": ["5"]}), SuiteTask(airline, "1", "c", {"tasks": ["1"]}))
    done_at_start = []

    def user(seed):
        done_at_start.append(len(load_results(tmp_path / "done.jsonl")))
        return DiverseScriptedUser()

    common = dict(config=BranchingConfig(token_budget=25_000), out_dir=tmp_path, user_name="diverse")
    asyncio.run(run_branching(Suite("t", tasks), scripted_agent_for(IMPERFECT), user, concurrency=2, **common))
    assert done_at_start == [0, 0]
    junctions = load_results(tmp_path / "junctions.jsonl")
    files = [j["file"] for j in junctions]
    assert len(files) == len(set(files)) >= 2 and all((tmp_path / f).exists() for f in files)
    rows = load_results(tmp_path)
    assert {r["task_id"] for r in rows} == {"5", "1"}
    branched = [r for r in rows if r["junction_file"]]
    assert len({r["task_id"] for r in branched}) == 2
    for row in branched:  # each from its own task's junction file
        assert replay(tmp_path, row, DiverseScriptedUser())[0] == row["success"]
    with pytest.raises(ValueError, match="concurrency"):
        asyncio.run(run_branching(Suite("t", tasks), scripted_agent_for(IMPERFECT), user, concurrency=0, **common))


def test_budgets_are_spent_and_monte_carlo_is_the_baseline(tmp_path):
    config = BranchingConfig(token_budget=30_000)
    asyncio.run(
        run_monte_carlo(
            suite(RETAIL, ["0"]),
            scripted_agent_for(()),
            lambda s: DiverseScriptedUser(1.0, s),
            config=config,
            out_dir=tmp_path,
            user_name="diverse",
        )
    )
    branch(tmp_path, (), budget=30_000)
    rows = load_results(tmp_path)
    for mode in ("branching", "monte_carlo"):
        spent = [r["tokens"] for r in rows if r["mode"] == mode]
        assert sum(spent) >= 30_000 and sum(spent) - spent[-1] < 30_000  # stops once the budget is spent
    assert all(r["junction"] is None for r in rows if r["mode"] == "monte_carlo")
    summary = summarize_run(tmp_path)
    assert summary["monte_carlo"]["seeds"]["0"]["failures"] == 0
    report = (tmp_path / "report.html").read_text()
    assert "branched at turn" in report and 'data-mode="monte_carlo"' in report


def test_a_rerun_resumes_and_settings_are_the_runs_identity(tmp_path):
    branch(tmp_path, IMPERFECT, budget=20_000)
    before = (tmp_path / "results.jsonl").read_text()
    branch(tmp_path, IMPERFECT, budget=20_000)
    assert (tmp_path / "results.jsonl").read_text() == before
    with pytest.raises(ValueError, match="other settings"):
        branch(tmp_path, IMPERFECT, budget=21_000)


def test_failure_metrics_on_hand_counted_rows():
    rows = [
        {"task_id": "a", "success": True, "tokens": 500, "failure_signature": None},
        {"task_id": "a", "success": False, "tokens": 250, "failure_signature": "x"},
        {"task_id": "a", "success": False, "tokens": 250, "failure_signature": "x"},
        {"task_id": "b", "success": False, "tokens": 1000, "failure_signature": "x"},
        {"task_id": "c", "success": True, "tokens": 2000, "failure_signature": None},
    ]
    assert failure_metrics(rows) == {
        "episodes": 5,
        "tokens": 4000,
        "failures": 3,
        "failures_per_1k_tokens": 0.75,
        "distinct_failures": 2,
        "tasks": 3,
        "tasks_with_failure": 2,
    }
    seeds = over_seeds([{"failures": 2}, {"failures": 4}], resamples=200)
    assert seeds["failures"]["mean"] == 3 and 2 <= seeds["failures"]["ci95"][0] <= seeds["failures"]["ci95"][1] <= 4
    with pytest.raises(ValueError):
        BranchingConfig(token_budget=0)
    with pytest.raises(ValueError):
        BranchingConfig(behaviours=("shouting",))


# ---------------------------------------------------------------------- the CLI
def test_cli_branching_runs_both_modes_and_refuses_bad_config(tmp_path, capsys):
    from agentgym.cli import main

    suite_file = tmp_path / "suite.jsonl"
    suite_file.write_text(json.dumps({"env": RETAIL, "task_id": "5", "env_kwargs": {"tasks": ["5"]}}) + "\n")
    out = tmp_path / "run"
    args = ["eval", "--branching", "--suite", str(suite_file), "--policy", "scripted-flawed", "--out", str(out)]
    assert main([*args, "--token-budget", "40000"]) == 0
    printed = capsys.readouterr().out
    assert "failures_per_1k_tokens" in printed and "branching / monte carlo" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["branching"]["seeds"]["0"]["tasks_with_failure"] == 1
    babyai = tmp_path / "babyai.jsonl"
    babyai.write_text(json.dumps({"env": "agentgym/text.babyai-v0", "task_id": "x"}) + "\n")
    for bad in (
        [*args, "--token-budget", "0"],
        [*args, "--behaviours", "shouting"],
        [*args, "-k", "2"],
        [*args, "--seeds", "0"],
        [*args, "--user", "nobody"],
        ["eval", "--branching", "--suite", str(babyai), "--policy", "scripted", "--out", str(tmp_path / "b")],
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(bad)
        assert exit_info.value.code == 2, bad
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 6 and all(line.startswith("agentgym eval: ") for line in errors)


def test_tiny_model_as_agent_and_user_end_to_end(tmp_path, capsys):
    """``agentgym eval --branching`` with the tiny model (random weights) as the agent and as the user, every token counted by its tokenizer.

    τ²'s agent prompt is 7-8k tokens in the tiny tokenizer: the tiny model is built with a
    16,384-position window (the default 4,096 is the next test's).
    """
    from agentgym.cli import main
    from agentgym.models import tiny_model_path

    model = str(tiny_model_path(max_positions=16384))
    suite_file = tmp_path / "suite.jsonl"
    suite_file.write_text(json.dumps({"env": RETAIL, "task_id": "5", "env_kwargs": {"tasks": ["5"]}}) + "\n")
    out = tmp_path / "run"
    small = ["--token-budget", "12000", "--max-tokens", "8", "--max-turns", "2"]
    assert main(["eval", "--branching", "--suite", str(suite_file), "--policy", model, "--user", model, "--out", str(out), *small]) == 0  # fmt: skip
    assert "branching / monte carlo" in capsys.readouterr().out
    rows = load_results(out / "results.jsonl")
    assert {r["mode"] for r in rows} == {"branching", "monte_carlo"}
    assert any(r["junction"] is not None for r in rows if r["mode"] == "branching")
    for row in rows:
        turns = Trajectory.from_dict(row["trajectory"]).turns
        assert row["tokens_user"] > 0  # at least the user's opening, counted by the tokenizer
        if row["junction"] is None:  # an episode from reset pays for every agent turn: its ids, as sampled
            assert row["tokens_agent"] == sum(len(t.prompt_ids) + len(t.completion_ids) for t in turns) > 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["branching"]["seeds"]["0"]["tokens"] == sum(r["tokens"] for r in rows if r["mode"] == "branching")


def test_a_prompt_that_overflows_the_models_window_stops_the_task(tmp_path, capsys):
    """The default tiny model's 4,096 positions cannot hold τ²'s prompt: each mode plays one episode, not an endless loop of free ones."""
    from agentgym.cli import main

    suite_file = tmp_path / "suite.jsonl"
    suite_file.write_text(json.dumps({"env": RETAIL, "task_id": "5", "env_kwargs": {"tasks": ["5"]}}) + "\n")
    out = tmp_path / "run"
    assert main(["eval", "--branching", "--suite", str(suite_file), "--policy", "tiny", "--user", "tiny", "--out", str(out)]) == 0  # fmt: skip
    assert "failed before the model answered" in capsys.readouterr().out
    rows = load_results(out / "results.jsonl")
    assert sorted(r["mode"] for r in rows) == ["branching", "monte_carlo"]
    assert all(r["error"].startswith("context_overflow") and r["turns"] == 0 for r in rows)


def test_user_tokens_are_the_policys_counts_when_it_has_them():
    from agentgym.rollout.user import PolicyUser
    from tests.helpers.scripted import ScriptedPolicy

    policy = ScriptedPolicy(["Hello."])
    metered = _MeteredUser(PolicyUser(policy))
    turn, _ = metered.reply(metered.start("You are a customer."), [{"role": "user", "content": "Hi!"}])
    reply = policy.chat_format.encode("Hello.") + [policy.chat_format.eos_token_id]
    assert metered.tokens == turn.tokens == len(policy.prompts[0]) + len(reply)


def test_scripted_agents_play_the_airline_domain(tmp_path):
    """Airline too: a task whose reference writes, under the flawed agent, fails on some branch."""
    tasks = tau2_tasks("airline")
    toolkit = tau2_environment("airline")().tools
    task = next(
        t
        for t in tasks.values()
        if any(toolkit.tool_type(a.name) == ToolType.WRITE for a in t.evaluation_criteria.actions or [])
    )
    metrics = branch(tmp_path, IMPERFECT, ids=(task.id,), env_id="agentgym/conversation.tau2-airline-v0", budget=25_000)
    assert metrics["tasks_with_failure"] == 1
