"""APRIL's partial rollouts in TreeGRPO (issue 34): the provisioning math on hand-computed numbers, and two steps with the tiny model.

StairsEnv's ``stairs-k`` episodes take k turns, so in one step the short ones finish while the
long ones are still running: those are paused at a turn boundary, carried to the next step and
resumed there, their earlier turns keeping the policy version that sampled them.
"""

from __future__ import annotations

import json

import pytest
import torch

from agentgym.models import tiny_model_path
from agentgym.rollout.runner import EpisodeRequest
from agentgym.rollout.trajectory import Trajectory
from agentgym.trainers.partial import PartialGroups, episodes_to_complete, extra_groups
from tests.helpers.trainers import capital_tree_trainer, tree_grpo_trainer

STAIRS = "tests.helpers.stairs:StairsEnv"


def test_extra_groups_and_episodes_to_complete_on_hand_computed_numbers():
    assert extra_groups(4, 0.5, open_groups=0) == 2
    assert extra_groups(3, 0.5, open_groups=0) == 2  # 1.5 rounded up
    assert extra_groups(4, 0.5, open_groups=1) == 1  # a group carried over takes an extra one's place
    assert extra_groups(4, 0.5, open_groups=5) == 0
    assert extra_groups(2, 1.0, open_groups=0) == 2 and extra_groups(2, 0.0, open_groups=0) == 0
    # open groups missing 3, 1, 2 and 4 episodes: two complete after at best 1 + 2 = 3 more finishes
    assert episodes_to_complete([3, 1, 2, 4], needed=2) == 3
    assert episodes_to_complete([3, 1], needed=5) == 4  # fewer open groups than needed: all of them
    with pytest.raises(ValueError):
        episodes_to_complete([0, 2], needed=1)
    with pytest.raises(ValueError):
        episodes_to_complete([2], needed=0)


def test_partial_groups_hold_finished_members_until_their_group_is_complete():
    groups = PartialGroups()
    items = groups.open([EpisodeRequest("t", repeat=j, group=g) for g in ("a", "b") for j in range(2)])
    assert len(items) == 4 and groups.remaining() == [2, 2]

    def done(group):
        return Trajectory("t", "toy", metadata={"group": group})

    first_a, only_b = done("a"), done("b")
    groups.add([first_a, only_b], items[1:2] + items[3:])
    assert groups.complete() == [] and groups.remaining() == [1, 1]
    second_a = done("a")
    groups.add([second_a], items[3:])
    assert groups.complete() == ["a"]
    assert groups.take(["a"]) == [first_a, second_a]  # held across calls, trained together
    assert groups.remaining() == [1] and len(groups.pending) == 1
    with pytest.raises(ValueError, match="in a group"):
        groups.open([EpisodeRequest("t")])


def _trainer(tmp_path, **settings):
    settings = {"tree": False, "num_generations": 2, "per_device_train_batch_size": 2, "max_steps": 2, **settings}
    settings = {"train_tasks": ["stairs-1", "stairs-4"], "max_turns": 4, "rollout_concurrency": 2, **settings}
    return tree_grpo_trainer(tmp_path, **{"env_id": STAIRS, "max_turn_tokens": 2, **settings})


def test_tree_grpo_carries_unfinished_episodes_to_the_next_step_and_resumes_them(tmp_path):
    trainer = _trainer(tmp_path, partial_rollouts=True, partial_over_provision=1.0)
    partial = trainer.partial
    resumed, calls = [], []
    resume = trainer.runner.resume

    async def watching(items, *, target=None):
        resumed.append([(item.request.group, item.turn) for item in items if item.episode is not None])
        return await resume(items, target=target)

    trainer.runner.resume = watching
    rollouts = trainer._rollouts

    def keeping(task_ids):
        calls.append((trainer.state.global_step, rollouts(task_ids), dict(trainer.partial_stats)))
        return calls[-1][1]

    trainer._rollouts = keeping
    trainer.train()
    assert trainer.state.global_step == 2
    (_, first, stats_1), (_, second, stats_2) = calls
    # Step 0: 2 own groups + 2 extra, 8 episodes; it stopped once 2 groups were complete, so the
    # 4-turn episodes of the groups still open were paused mid-episode and carried over.
    assert len({r.metadata["group"] for r in first}) >= 2 and stats_1["partial/carried"] >= 1
    carried_groups = {g for calls_items in resumed for g, turn in calls_items if turn >= 1}
    assert carried_groups and all(g.startswith("0:") for g in carried_groups)  # step 0's, resumed in step 1
    assert stats_2["partial/resumed"] >= 1
    # every group is trained once, whole: num_generations members each
    trained = [r.metadata["group"] for r in first + second]
    assert all(trained.count(g) == 2 for g in set(trained)) and len(set(trained)) == len(trained) / 2
    late = [r for r in second if r.metadata["group"].startswith("0:")]
    assert late  # step-0 groups whose paused episodes finished in step 1, trained there
    # its paused episodes' first turns were sampled by version 0, the turns after the resume by version 1
    assert {turn.policy_version for r in late for turn in r.turns} == {0, 1}
    logged = [h for h in trainer.state.log_history if "off_policy/weight_mean" in h]
    assert logged and all(h["off_policy/weight_mean"] > 0 for h in logged)  # weighted as SAO's decoupled objective
    assert partial.pending == []  # the episodes still carried at the end were discarded, their envs closed


def test_partial_rollouts_refuse_trees_and_retries(tmp_path):
    from agentgym.trainers.tree_grpo_config import TreeGRPOConfig

    common = dict(output_dir=str(tmp_path), use_cpu=True, report_to="none", partial_rollouts=True)
    TreeGRPOConfig(tree=False, **common)
    for bad in (dict(tree=True), dict(tree=False, reflect_retry=True)):
        with pytest.raises(ValueError, match="partial_rollouts pauses linear episodes"):
            TreeGRPOConfig(**bad, **common)
    with pytest.raises(ValueError, match="partial_over_provision"):
        TreeGRPOConfig(tree=False, partial_over_provision=-1, **common)


# ---------------------------------------------------------------- branching from a replayed success's prefixes
def test_prefix_fork_turns_spread_along_the_success():
    from agentgym.trainers.replay import prefix_fork_turns

    assert prefix_fork_turns(4, 2) == [1, 3]  # 4/3 -> 1, 8/3 -> 3
    assert prefix_fork_turns(6, 2) == [2, 4]
    assert prefix_fork_turns(2, 2) == [1, 1]  # one prefix only: both branch after turn 1
    assert prefix_fork_turns(9, 1) == [4]  # 4.5 rounds to even
    assert prefix_fork_turns(1, 3) == [] and prefix_fork_turns(5, 0) == []
    with pytest.raises(ValueError):
        prefix_fork_turns(4, -1)


def _stairs_success(agent, task: str):
    """A real, env-graded success of a StairsEnv task: the agent applies the reply "A" (a capital) until the end."""
    import asyncio

    from agentgym.rollout.policy import Completion
    from tests.helpers.stairs import StairsEnv

    ids = agent.policy.chat_format.tokenizer.encode("A", add_special_tokens=False)

    async def play(env):
        episode = await agent.start(env, task)
        while not episode.done:
            await agent.apply(episode, Completion("A", token_ids=ids, logprobs=[-1.0] * len(ids)))
        return episode.trajectory()

    env = StairsEnv()
    try:
        trajectory = asyncio.run(play(env))
    finally:
        env.close()
    assert trajectory.success
    return trajectory


def test_agent_replay_reaches_the_recorded_state_token_for_token_and_refuses_a_divergence():
    import asyncio
    import dataclasses

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentgym.rollout.agent import Agent, AgentConfig
    from agentgym.rollout.hf_policy import HFPolicy
    from tests.helpers.stairs import StairsEnv

    path = str(tiny_model_path())
    policy = HFPolicy.from_model(
        AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path), seed=0
    )
    agent = Agent(policy, AgentConfig(max_turns=4, mode="tokens"))
    success = _stairs_success(agent, "stairs-3")
    env = StairsEnv()
    try:
        episode = asyncio.run(agent.replay(env, success, 2))
        assert episode.turn == 2 and not episode.done and env.unwrapped.replies == 2
        assert episode.prompt_ids == success.turns[2].prompt_ids  # the third turn's context, token for token
        assert [t.completion_ids for t in episode.turns] == [t.completion_ids for t in success.turns[:2]]
        tampered = dataclasses.replace(
            success, turns=[dataclasses.replace(success.turns[0], observation="Done.")] + success.turns[1:]
        )
        with pytest.raises(ValueError, match="diverged at turn 1"):
            asyncio.run(agent.replay(env, tampered, 2))
        with pytest.raises(ValueError, match="a prefix of 0 to 2 turns"):
            asyncio.run(agent.replay(env, success, 3))
    finally:
        env.close()
        asyncio.run(policy.aclose())


def test_all_failed_groups_get_branches_from_a_replayed_successs_prefixes(tmp_path):
    from agentgym.trainers.advantages import pivotal_trainable
    from agentgym.trainers.replay import prefix_fork_turns

    trainer = _trainer(
        tmp_path, success_replay=True, replay_branches=2, train_tasks=["stairs-3", "stairs-4"], rollout_concurrency=8
    )
    for task in ("stairs-3", "stairs-4"):  # the newest success of a task is replayed: these, or later ones
        trainer.success_replay.add(_stairs_success(trainer.agent, task))
    rows_of, kept = trainer._rows, []

    def keeping(records):
        kept.append((records, rows_of(records)))
        return kept[-1][1]

    trainer._rows = keeping
    branch_rollouts, plans = trainer._replay_branch_rollouts, {}

    def planning(records):
        branches = branch_rollouts(records)
        plans.update(trainer.branch_plan)  # (group, repeat) -> (the success it branched from, its fork turn)
        return branches

    trainer._replay_branch_rollouts = planning
    trainer.train()
    assert trainer.state.global_step == 2
    branches = [r for records, _ in kept for r in records if r.metadata.get("replay_branch")]
    assert branches  # the random policy fails whole groups: they branched
    for branch in branches:
        success, fork = plans[(branch.metadata["group"], branch.metadata["repeat"])]
        assert success.success and success.task_id == branch.task_id and fork == branch.metadata["fork_turn"]
        assert fork == prefix_fork_turns(len(success.turns), 2)[branch.metadata["repeat"]]  # 3 turns: 1, 2; 4: 1, 3
        assert [t.completion_ids for t in branch.turns[:fork]] == [t.completion_ids for t in success.turns[:fork]]
        assert len(branch.turns) == len(success.turns)  # the env went on from the replayed state, not from reset
        assert [t.policy_version for t in branch.turns[:fork]] == [t.policy_version for t in success.turns[:fork]]
        groups = {r.metadata["group"] for records, _ in kept for r in records if not r.metadata.get("replay_branch")}
        assert branch.metadata["group"] in groups  # it joined an all-failed group of this step
        assert trainer._trainable(branch, pivot=False) == pivotal_trainable(len(branch.turns), fork)  # prefix: no loss
    logged = [h for h in trainer.state.log_history if "replay/branches" in h]
    assert logged and sum(h["replay/branches"] for h in logged) == len([b for b in branches if b.error is None])
    with pytest.raises(ValueError, match="replay_branches needs success_replay"):
        _trainer(tmp_path / "bad", replay_branches=2)


# ---------------------------------------------------------------- the learning benchmark's variants
def _learning_benchmark():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "learning.py"
    spec = importlib.util.spec_from_file_location("learning_benchmark", path)
    assert spec is not None and spec.loader is not None
    learning = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(learning)
    return learning


def test_every_learning_benchmark_variant_is_a_config_the_trainers_accept(tmp_path):
    from agentgym.train import OWN_KEYS, TRAINERS, _load, load_config

    learning = _learning_benchmark()
    assert {
        "linear_grpo",
        "sao",
        "tree_grpo",
        "trace",
        "reflect_retry",
        "failure_retry",
        "replay",
        "median_pivot",
        "median_baseline",
        "april",
    } <= set(learning.VARIANTS)
    for env in learning.ENVS:
        for name, (_, settings) in learning.VARIANTS.items():
            config = load_config(
                learning.config_path(env, name), [*settings, f"output_dir={tmp_path}", "env_step_budget=100"]
            )
            config_cls = _load(TRAINERS[config["trainer"]][1])
            args = config_cls(**{k: v for k, v in config.items() if k not in OWN_KEYS}, use_cpu=True)
            for setting in settings:  # the variant's switch is on
                key, value = setting.split("=")
                assert str(getattr(args, key)).lower() == value, (env, name, key)


def test_the_learning_benchmark_validates_on_tasks_it_does_not_evaluate_on(tmp_path):
    """``--validation``: an env's validation tasks are never its evaluated held-out ones, and the trainers take them."""
    import argparse

    from agentgym.train import OWN_KEYS, TRAINERS, _load, load_config
    from agentgym.trainers.warm_start import split_tasks

    learning = _learning_benchmark()
    for env, expected in {
        "keychain": ["heldout-100", "heldout-101"],  # the held-out split after the 100 evaluated
        "calculator": ["heldout-100", "heldout-101"],
        "textworld": ["dev/coin/0", "dev/coin/1"],
        "scienceworld": ["dev/lifespan-longest-lived/62", "dev/lifespan-longest-lived/63"],
    }.items():
        run = argparse.Namespace(env=env, validation=2, validation_every=3, heldout=learning.ENVS[env].heldout)
        config = load_config(learning.config_path(env, "sao"))
        overrides = learning.validation_overrides(run, config)
        _, evaluated = split_tasks(config, learning.ENVS[env].heldout_split, run.heldout)
        accepted = load_config(learning.config_path(env, "sao"), [*overrides, f"output_dir={tmp_path}"])
        assert accepted["validation_tasks"] == expected and not set(expected) & set(evaluated)
        assert accepted["validation_env_kwargs"] == {"tasks": accepted["validation_tasks"]}
        args = _load(TRAINERS["sao"][1])(**{k: v for k, v in accepted.items() if k not in OWN_KEYS}, use_cpu=True)
        assert args.validation_every == 3 and len(args.validation_tasks) == 2
    assert learning.validation_overrides(argparse.Namespace(validation=0), {}) == []


def test_the_learning_benchmark_reports_held_out_success_per_task_and_per_category():
    """Calculator's categories are its operator patterns: each category's success is the mean of its tasks' (hand
    numbers), and a real evaluation (the untrained tiny model on 8 held-out tasks) reports each task's success with
    its category, the greedy success their mean."""
    import argparse

    from agentgym.train import load_config
    from agentgym.trainers.warm_start import split_tasks

    learning = _learning_benchmark()
    categories = {"t1": "a + b * c", "t2": "a + b * c", "t3": "a * b + c", "t4": "a + b * c"}
    successes = {"t1": 1.0, "t2": 0.0, "t3": 0.0, "t4": 1.0}
    assert learning.by_category(successes, categories) == {"a * b + c": 0.0, "a + b * c": pytest.approx(2 / 3)}

    args = argparse.Namespace(env="calculator", heldout=8)
    config = load_config(learning.config_path("calculator", "linear_grpo"))
    figures = learning.heldout(args, tiny_model_path(), config)
    ids = split_tasks(config, "heldout", 8)[1]
    assert list(figures["heldout_by_task"]) == ids
    assert figures["heldout_success"] == pytest.approx(sum(figures["heldout_by_task"].values()) / 8)
    patterns = learning.heldout_categories("calculator", 8)
    assert set(patterns.values()) <= {"a + b * c", "a * b + c", "a + b + c", "a * b * c"}
    assert len(set(patterns.values())) > 1
    assert figures["heldout_by_category"] == learning.by_category(figures["heldout_by_task"], patterns)
    assert 0.0 <= figures["heldout_success_sampled"] <= 1.0
    # KeyChain's tasks have one category (their split): no breakdown
    keychain = learning.heldout(
        argparse.Namespace(env="keychain", heldout=2),
        tiny_model_path(),
        load_config(learning.config_path("keychain", "sao")),
    )
    assert "heldout_by_category" not in keychain and len(keychain["heldout_by_task"]) == 2


def test_the_learning_benchmark_pairs_each_variant_with_linear_grpos_timed_run_of_its_seed(tmp_path):
    """Kept seed results (no training) summarised on hand-computed numbers: each variant's held-out success minus
    linear GRPO's timed run of the same seed, and its env steps as a share of that run's, at both budgets; the
    means table and the table of every seed side by side (in the order the seeds were given)."""
    import argparse

    learning = _learning_benchmark()
    args = argparse.Namespace(
        **{
            **dict.fromkeys(learning.SEED_SETTINGS),
            **{"runs": ["linear_grpo", "trace"], "budget": "both", "set": [], "validation": 0, "validation_every": 5},
        }
    )

    def run(success: float, env_steps: int) -> dict:
        return {
            "heldout_success": success,
            "gain_points": 0.0,
            "gain_points_sampled": 0.0,
            "env_steps": env_steps,
            "steps": env_steps // 10,
        }

    for seed, (linear, trace, linear_at, trace_at) in {
        0: (run(0.5, 1000), run(0.6, 500), run(14 / 30, 500), run(0.6, 500)),  # a text world's 30 games
        1: (run(0.6, 1000), run(0.6, 600), run(0.5, 600), run(0.55, 600)),
    }.items():
        seed_args = {**vars(args), "seed": seed}
        settings = {key: value for key, value in seed_args.items() if key in learning.SEED_SETTINGS}
        results = {
            "sft": {"heldout_success": 0.2},
            "linear_grpo": {**linear, "generated_tokens": 100.0},
            "trace": {**trace, "generated_tokens": 50.0},
            "equal_env_steps": {
                "linear_grpo": {**linear_at, "generated_tokens": 50.0},
                "trace": {**trace_at, "generated_tokens": 50.0},
            },
        }
        (tmp_path / f"seed-{seed}").mkdir()
        (tmp_path / f"seed-{seed}" / "results.json").write_text(json.dumps({"settings": settings, "results": results}))
    args.seeds = [1, 0]
    summarised = learning.over_seeds(args, tmp_path)
    summary = summarised["summary"]
    # t(0.975, 1 degree of freedom) = 12.7062: half-width 12.7062 * sd / sqrt(2)
    assert summary["trace_vs_linear_points"]["values"] == pytest.approx([0.0, 10.0])
    assert summary["trace_vs_linear_points"]["ci95"] == pytest.approx([5 - 63.531, 5 + 63.531], abs=1e-3)
    assert summary["trace_env_steps_share_of_linear"]["values"] == pytest.approx([0.6, 0.5])
    assert summary["trace@env_steps_vs_linear_points"]["values"] == pytest.approx([-5.0, 10.0])
    assert summary["linear_grpo@env_steps_vs_linear_points"]["values"] == pytest.approx([-10.0, -10 / 3])
    assert "linear_grpo_vs_linear_points" not in summary  # itself
    table = learning.variant_table(summary, ["linear_grpo", "trace"]).splitlines()
    assert table[2].startswith("| linear_grpo | equal wall time | 55.0 [-8.5, 118.5] | 0.0 [0.0, 0.0] | — |")
    assert table[4] == (
        "| trace | equal wall time | 60.0 [60.0, 60.0] | 0.0 [0.0, 0.0] | 5.0 [-58.5, 68.5] | 550 [-85, 1185] "
        "| 55 [-9, 119] | 50 [50, 50] |"
    )
    by_seed = summarised["seed_table"].splitlines()
    assert by_seed[0].startswith("| variant | budget | held-out success, greedy (%): seed 1 / 0 |")
    assert by_seed[2] == "| linear_grpo | equal wall time | 60 / 50 | — | — | 1000 / 1000 | — | 0.1 / 0.1 | 100 / 100 |"
    # −6.667 ± 12.7062 * 4.7140 / sqrt(2) = −6.667 ± 42.354; a share of 30 games keeps one decimal (46.7)
    assert by_seed[3] == (
        "| linear_grpo | equal env steps | 50 / 46.7 | \u221210 / \u22123.3 | \u22126.7 [\u221249.0, +35.7] | 600 / 500 "
        "| 60 / 50 | 0.1 / 0.1 | 60 / 50 |"
    )
    assert by_seed[4] == (
        "| trace | equal wall time | 60 / 60 | 0 / +10 | +5.0 [\u221258.5, +68.5] | 600 / 500 | 60 / 50 | 0.1 / 0.1 "
        "| 60 / 50 |"
    )


@pytest.mark.slow
def test_a_learning_benchmark_run_reports_its_best_checkpoint_on_validation_beside_the_last(tmp_path, monkeypatch):
    """Two SAO steps on KeyChain validated after each: the best checkpoint's held-out success is measured from
    ``best-checkpoint`` (the untrained tiny model ties at 0, and a tie keeps the first step) and reported with both
    validations. The finished run is kept in its output dir (a seed's 16 runs take hours: a crash part-way loses one
    run, not the seed) and reused while its settings are the same, not when its budget, its own ``--set`` or the seed
    changes (another run's ``--set`` does not matter)."""
    import argparse

    learning = _learning_benchmark()
    args = argparse.Namespace(
        env="keychain", seed=0, heldout=2, validation=2, validation_every=1, set=[("linear_grpo", "seed=3")]
    )
    start = {"sft": {"heldout_success": 0.0, "heldout_success_sampled": 0.0}}
    budget = ["max_steps=2", "per_device_train_batch_size=2", "rollout_concurrency=2", "log_kl_to_start=false"]
    run = learning.run_variant(args, "sao", tiny_model_path(), tmp_path / "sao", budget, start)
    validations = json.loads((tmp_path / "sao" / "validation.json").read_text())
    assert [entry["step"] for entry in validations["history"]] == [1, 2]
    best = validations["best"]
    assert run["best"]["step"] == best["step"] and run["best"]["validation_success"] == best["success"]
    assert run["best"]["last_validation_success"] == validations["last"]["success"]
    assert 0.0 <= run["best"]["heldout_success"] <= 1.0 and "validation" not in run
    assert (tmp_path / "sao" / "best-checkpoint" / "config.json").exists()

    def trains(*_args, **_kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr(learning, "train_run", trains)
    other_set = argparse.Namespace(**{**vars(args), "set": [("linear_grpo", "seed=4")]})
    kept = learning.run_variant(other_set, "sao", tiny_model_path(), tmp_path / "sao", budget, start)
    assert {key: kept[key] for key in ("steps", "heldout_success", "best")} == {
        "steps": 2,
        "heldout_success": run["heldout_success"],
        "best": run["best"],
    }
    other_start = {"sft": {"heldout_success": 1.0, "heldout_success_sampled": 0.0}}
    regained = learning.run_variant(other_set, "sao", tiny_model_path(), tmp_path / "sao", budget, other_start)
    assert regained["gain_points"] == pytest.approx(100 * (run["heldout_success"] - 1.0))
    for changed, changed_budget in (
        ({"seed": 1}, budget),
        ({"set": [("sao", "learning_rate=1e-5")]}, budget),
        ({}, ["max_steps=3", *budget[1:]]),
    ):
        changed_args = argparse.Namespace(**{**vars(args), **changed})
        with pytest.raises(AssertionError, match="trained again"):
            learning.run_variant(changed_args, "sao", tiny_model_path(), tmp_path / "sao", changed_budget, start)


def test_an_env_step_budget_stops_at_the_first_step_past_it_and_snapshots_keep_each_marks_policy(tmp_path):
    """Linear GRPO on CapitalEnv (one-turn episodes) with ``env_step_budget=10`` and ``env_step_snapshots=3``: the
    run stops at the end of the first step at or past 10 env steps, and each mark m = 3, 6, 9, ... up to its env
    steps holds the weights the policy had at the end of the first step at or past m, with that step's figures:
    what an ``env_step_budget=m`` run would stop with."""
    from safetensors.torch import load_file
    from transformers import TrainerCallback

    from agentgym.trainers.rollouts import ENV_STEP_SNAPSHOTS, SNAPSHOT_RECORD

    trainer = capital_tree_trainer(tmp_path, max_steps=50, env_step_budget=10, env_step_snapshots=3)
    ends: list[tuple[int, int, int, dict]] = []  # (step, env steps, tokens, weights) at each step's end

    class Keep(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            weights = {k: v.detach().clone() for k, v in trainer.rollout_model.state_dict().items()}
            ends.append((state.global_step, trainer.env_steps, trainer.generated_tokens, weights))

    trainer.add_callback(Keep())
    trainer.train()
    assert [env_steps >= 10 for _, env_steps, _, _ in ends] == [False] * (len(ends) - 1) + [True]
    assert trainer.state.global_step == ends[-1][0] < 50
    marks = sorted(int(p.name) for p in (tmp_path / ENV_STEP_SNAPSHOTS).iterdir())
    assert marks == list(range(3, ends[-1][1] + 1, 3))
    for mark in marks:
        step, env_steps, tokens, weights = next(end for end in ends if end[1] >= mark)
        snapshot = tmp_path / ENV_STEP_SNAPSHOTS / str(mark)
        record = json.loads((snapshot / SNAPSHOT_RECORD).read_text())
        assert record == {"mark": mark, "step": step, "env_steps": env_steps, "generated_tokens": tokens}
        saved = load_file(snapshot / "model.safetensors")
        assert saved and all(torch.equal(saved[key], weights[key]) for key in saved)
    # the policy moved between the first and the last step, so equal weights above are the right step's, not any
    first, last = ends[0][3], ends[-1][3]
    assert any(not torch.equal(first[key], last[key]) for key in first)

    from agentgym.trainers.tree_grpo_config import TreeGRPOConfig

    with pytest.raises(ValueError, match="env_step_snapshots must be at least 1"):
        TreeGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", env_step_snapshots=0)


def test_the_learning_benchmark_takes_a_variants_equal_env_steps_figures_from_its_timed_runs_snapshot(
    tmp_path, monkeypatch
):
    """The budget is the fewest env steps a timed run took, rounded down to the snapshots' spacing (or the given
    one); the variant's figures at it come from its timed run's snapshot there (the untrained tiny model standing
    in for one), are kept like a run's, and the timed run's other snapshots are deleted; no snapshot there: None (the
    caller trains a run to the budget instead)."""
    import argparse
    import shutil

    from agentgym.trainers.rollouts import ENV_STEP_SNAPSHOTS, SNAPSHOT_RECORD

    learning = _learning_benchmark()
    assert learning.equal_env_steps_budget([5508.0, 7012.0, 10141.0], 100) == 5500
    assert learning.equal_env_steps_budget([5508.0, 7012.0], 1) == 5508  # --env-steps-from runs: the fewest
    assert learning.equal_env_steps_budget([70.0, 90.0], 100) == 70  # under one spacing: the fewest itself
    assert learning.equal_env_steps_budget([5508.0], 100, given=4000) == 4000
    timed = tmp_path / "linear_grpo"
    for mark, step in ((400, 6), (500, 7)):
        shutil.copytree(tiny_model_path(), timed / ENV_STEP_SNAPSHOTS / str(mark))
        record = {"mark": mark, "step": step, "env_steps": mark + 20, "generated_tokens": 10 * mark}
        (timed / ENV_STEP_SNAPSHOTS / str(mark) / SNAPSHOT_RECORD).write_text(json.dumps(record))
    args = argparse.Namespace(env="keychain", seed=0, heldout=2, set=[], env_steps_from="snapshots")
    start = {"sft": {"heldout_success": 0.5, "heldout_success_sampled": 0.25}}
    run = learning.snapshot_variant(args, "linear_grpo", timed, tmp_path / "linear_grpo-steps", 500, start)
    assert {key: run[key] for key in ("steps", "env_steps", "generated_tokens")} == {
        "steps": 7,
        "env_steps": 520.0,
        "generated_tokens": 5000.0,
    }
    assert run["gain_points"] == pytest.approx(100 * (run["heldout_success"] - 0.5))
    assert run["gain_points_sampled"] == pytest.approx(100 * (run["heldout_success_sampled"] - 0.25))
    assert sorted(p.name for p in (timed / ENV_STEP_SNAPSHOTS).iterdir()) == ["500"]

    def evaluates(*_args, **_kwargs):
        raise AssertionError("evaluated again")

    monkeypatch.setattr(learning, "heldout", evaluates)
    assert learning.snapshot_variant(args, "linear_grpo", timed, tmp_path / "linear_grpo-steps", 500, start) == run
    assert learning.snapshot_variant(args, "linear_grpo", timed, tmp_path / "linear_grpo-steps", 600, start) is None
    # Kept figures are compared with the start they are given now (a rerun's, should its figures differ).
    other_start = {"sft": {"heldout_success": 0.0, "heldout_success_sampled": 1.0}}
    kept = learning.snapshot_variant(args, "linear_grpo", timed, tmp_path / "linear_grpo-steps", 500, other_start)
    assert kept["gain_points"] == pytest.approx(100 * run["heldout_success"])
    assert kept["gain_points_sampled"] == pytest.approx(100 * (run["heldout_success_sampled"] - 1.0))


def test_the_learning_benchmark_measures_a_start_once_and_keeps_its_figures_for_its_weights(tmp_path, monkeypatch):
    """A seed's runs are all compared with one measurement of its start (the sampled success is a new draw each
    time): the figures are kept beside the start's weights and reused by a rerun, and measured again for other
    weights or another held-out count."""
    import argparse
    import shutil

    from safetensors.torch import load_file, save_file

    from agentgym.train import load_config

    learning = _learning_benchmark()
    start = tmp_path / "sft"
    shutil.copytree(tiny_model_path(), start)
    args = argparse.Namespace(env="keychain", heldout=2)
    config = load_config(learning.config_path("keychain", "sao"))
    figures = learning.start_heldout(args, start, config)
    assert len(figures["heldout_by_task"]) == 2 and 0.0 <= figures["heldout_success_sampled"] <= 1.0

    def evaluates(*_args, **_kwargs):
        raise AssertionError("evaluated again")

    monkeypatch.setattr(learning, "heldout", evaluates)
    assert learning.start_heldout(args, start, config) == figures
    with pytest.raises(AssertionError, match="evaluated again"):
        learning.start_heldout(argparse.Namespace(env="keychain", heldout=3), start, config)
    weights = load_file(start / "model.safetensors")
    name = next(iter(weights))
    save_file({**weights, name: weights[name] + 1}, start / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(AssertionError, match="evaluated again"):
        learning.start_heldout(args, start, config)
