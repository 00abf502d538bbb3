"""Warm starts and quick checks for RL runs: SFT on scripted demonstrations (TRL's SFTTrainer) and held-out success of a model.

Demonstrations go through the real agent loop in token mode, so the SFT sequences are exactly
the ones RL will see (same chat template, same env tokens); only the policy's tokens are
trained (``assistant_masks`` = the env-token mask).

The built-in CPU recipes are on KeyChain and Calculator (envs that script their own
demonstrations; configs ``examples/configs/keychain-*.yaml``, ``calculator-*.yaml``), and on
ScienceWorld and TextWorld, whose demonstrations are their gold paths and walkthroughs
(``examples/configs/scienceworld-*.yaml``, ``textworld-*.yaml``): :func:`scripted_warm_start`
is what a training config's ``warm_start:`` section runs (:mod:`agentgym.train`), and
:func:`held_out_success` measures a model on the env's held-out split, as ``make demo`` and
``benchmarks/learning.py`` do (:func:`held_out_tasks`: each task's success, :func:`task_categories`: their categories). :func:`split_tasks` names a split's tasks in both kinds of catalog.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

from agentgym.core import AgentEnv
from agentgym.envs.tool.generated import GeneratedTasks, task_ids
from agentgym.registration import make_env_factory
from agentgym.rollout.agent import Agent, AgentConfig
from agentgym.rollout.chat import ChatFormat
from agentgym.rollout.hf_policy import HFPolicy
from agentgym.rollout.policy import Completion, Policy, SamplingParams
from agentgym.rollout.runner import EpisodeRequest, Runner, RunnerConfig
from agentgym.rollout.trajectory import Trajectory

__all__ = [
    "RL_DEMO_START",
    "ScriptedPolicy",
    "WarmStartFailed",
    "agent_config",
    "demonstration_dataset",
    "demonstrations",
    "held_out_success",
    "held_out_tasks",
    "scripted_warm_start",
    "sft_warm_start",
    "split_tasks",
    "success_rate",
    "task_categories",
]

#: The start ``make demo`` and ``benchmarks/learning.py`` train from: the tiny model imitating a
#: demonstrator that submits the key a pointer names instead of looking it up 60% of the time
#: (1000 tasks, 7 epochs). Greedy, it answers early on most two-hop tasks; sampled, it follows
#: the pointer often enough for RL to find the reward (docs/results.md, Training). It checks
#: itself: a start that solves under 15% of 100 unseen train tasks when sampled (one seed in three
#: never learned to copy a number in 7 epochs) trains 7 more, up to 3 rounds.
RL_DEMO_START = {"tasks": 1000, "epochs": 7.0, "mistake_rate": 0.6, "min_start_success": 0.15, "max_rounds": 3}
#: The file in a warm start's directory that records its rounds; a start is complete when it exists.
WARM_START_RECORD = "warm_start.json"


class WarmStartFailed(RuntimeError):
    """The SFT start did not reach ``min_start_success`` on its check tasks within ``max_rounds``."""


class ScriptedPolicy(Policy):
    """Replies with given texts in order (ended with the stop token): a demonstrator in token mode."""

    name = "scripted"

    def __init__(self, chat_format: ChatFormat, replies: Sequence[str]):
        self.chat_format = chat_format
        self.replies = list(replies)

    async def generate(self, prompt_ids, sampling: SamplingParams) -> Completion:
        text = self.replies.pop(0) if self.replies else ""
        ids = self.chat_format.encode(text) + [self.chat_format.eos_token_id]
        return Completion(text=text, token_ids=ids, logprobs=[0.0] * len(ids), policy_version=self.version)


def demonstrations(
    env_factory: Callable[[], AgentEnv],
    task_ids: Sequence[str],
    replies_for: Callable[[str], list[str]],
    tokenizer,
    agent_config: AgentConfig,
) -> list[Trajectory]:
    """One scripted episode per task, run through the agent loop exactly as RL episodes are, and no longer than its script.

    A script that does not end the game (a text world's walkthrough with a step missed) ends its
    episode after its last reply, truncated: the SFT never trains on replies the script did not make.
    """
    chat_format = ChatFormat(tokenizer)

    async def run() -> list[Trajectory]:
        trajectories = []
        for task_id in task_ids:
            env = env_factory()
            try:
                replies = replies_for(task_id)
                turns = min(agent_config.max_turns or len(replies), len(replies))
                agent = Agent(ScriptedPolicy(chat_format, replies), dataclasses.replace(agent_config, max_turns=turns))
                trajectories.append(await agent.run(env, task_id))
            finally:
                await env.aclose()
        return trajectories

    return asyncio.run(run())


def demonstration_dataset(trajectories: Sequence[Trajectory], failures: bool = False):
    """SFT rows (``input_ids``, ``assistant_masks``) from the demonstrations' training sequences: the successful ones, or all with ``failures``."""
    from datasets import Dataset

    rows = [sequence for t in trajectories if t.success or failures for sequence in t.sequences()]
    return Dataset.from_dict({"input_ids": [s.input_ids for s in rows], "assistant_masks": [s.mask for s in rows]})


def sft_warm_start(
    model_path: str | Path,
    dataset,
    output_dir: str | Path,
    *,
    epochs: float = 3.0,
    learning_rate: float = 1e-3,
    batch_size: int = 8,
    seed: int = 0,
) -> Path:
    """Fine-tune ``model_path`` on ``dataset`` with TRL's SFTTrainer; the model and tokenizer are saved to ``output_dir``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(model_path, local_files_only=True, dtype=torch.float32)
    args = SFTConfig(
        output_dir=str(output_dir),
        num_train_epochs=epochs,
        learning_rate=learning_rate,
        per_device_train_batch_size=batch_size,
        seed=seed,
        bf16=torch.cuda.is_available(),
        activation_checkpointing=False,
        logging_steps=10,
        logging_first_step=True,
        save_strategy="no",
        report_to="none",
        lr_scheduler_type="cosine",
        warmup_steps=10,
        max_length=None,
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    trainer.train()
    trainer.save_model(str(output_dir))
    tokenizer.save_pretrained(str(output_dir))
    trainer.state.save_to_json(str(Path(output_dir) / "trainer_state.json"))  # the SFT's loss curve
    return Path(output_dir)


def _episodes(
    model,
    env_factory: Callable[[], AgentEnv],
    task_ids: Sequence[str],
    agent_config: AgentConfig,
    concurrency: int = 16,
) -> list[Trajectory]:
    """One episode of each of ``task_ids`` by ``model`` (a directory or an :class:`HFPolicy`) with ``agent_config``'s sampling."""

    async def run() -> list[Trajectory]:
        policy = model if isinstance(model, HFPolicy) else HFPolicy(model, device="cpu", max_batch_size=concurrency)
        try:
            runner = Runner(
                Agent(policy, agent_config), env_factory, RunnerConfig(concurrency=concurrency, progress=False)
            )
            result = await runner.run([EpisodeRequest(t) for t in task_ids])
        finally:
            if policy is not model:
                await policy.aclose()
        # Without a tree job every record is a Trajectory.
        return [cast(Trajectory, record) for record in result.records]

    return asyncio.run(run())


def success_rate(
    model,
    env_factory: Callable[[], AgentEnv],
    task_ids: Sequence[str],
    agent_config: AgentConfig,
    concurrency: int = 16,
) -> float:
    """The fraction of ``task_ids`` solved by ``model`` (a directory or an :class:`HFPolicy`) with ``agent_config``'s sampling."""
    played = _episodes(model, env_factory, task_ids, agent_config, concurrency)
    return math.fsum(trajectory.success for trajectory in played) / len(task_ids)


def agent_config(config: dict, greedy: bool):
    """The agent loop a training config's rollouts use (greedy for evaluation); ``config`` is a training config's mapping."""
    return AgentConfig(
        sampling=SamplingParams(
            max_tokens=config["max_turn_tokens"], temperature=0.0 if greedy else config.get("temperature", 1.0)
        ),
        system_prompt=config.get("system_prompt"),
        max_turns=config["max_turns"],
        mode="tokens",
    )


def split_tasks(config: dict, split: str, count: int, skip: int = 0) -> tuple[dict, list[str]]:
    """The env kwargs and ids of ``count`` tasks of the config's env's ``split``, after its first ``skip``.

    A generated catalog (KeyChain, Calculator: ids ``<split>-<n>``) makes any id of its splits; any other
    catalog lists its tasks with their split as category (the text worlds' ``<split>/<name>/<n>``: the
    splits the config's ``env_kwargs`` list, whatever their ``tasks=`` selects), and must list enough.
    The kwargs are the config's with ``tasks`` set to the ids.
    """
    kwargs = {key: value for key, value in config["env_kwargs"].items() if key != "tasks"}
    probe = make_env_factory(config["env_id"], kwargs)()
    try:
        catalog = getattr(probe.unwrapped, "task_data", None)
        if isinstance(catalog, GeneratedTasks):
            listed = task_ids(split, skip + count)
        else:
            listed = [task.id for task in probe.unwrapped.tasks() if task.category == split]
    finally:
        probe.close()
    if len(listed) < skip + count:
        raise ValueError(
            f"{config['env_id']} lists {len(listed)} {split} tasks with env_kwargs {kwargs}; {skip + count} are "
            "needed: list more of that split"
        )
    ids = listed[skip : skip + count]
    return {**kwargs, "tasks": ids}, ids


def scripted_warm_start(
    out: str | Path,
    config: dict,
    *,
    tasks: int = 1000,
    epochs: float = 2.5,
    learning_rate: float = 3e-3,
    seed: int = 0,
    base: str | Path | None = None,
    mistake_rate: float = 0.0,
    min_start_success: float = 0.0,
    check_tasks: int = 100,
    max_rounds: int = 1,
) -> Path:
    """``base`` (default: the tiny model) fine-tuned on scripted solutions of ``tasks`` train-split tasks; built once per ``out``.

    The env (``config["env_id"]``) scripts the demonstrations: it has a
    ``demonstration_replies(task_id, mistake_rate, rng)`` method (KeyChain, Calculator, the text
    worlds), and its train split's first ``tasks`` tasks are demonstrated (:func:`split_tasks`: a
    text world's config must list that many). On KeyChain with ``mistake_rate`` 0 the defaults leave the
    tiny model at 58% of held-out tasks solved (greedy; seed 0), its failures confident copying
    mistakes; the start is steep in the epochs: 1000 × 2 gave 13%, 1000 × 3 gave 69.5%.
    ``mistake_rate`` > 0 imitates a demonstrator with the env's scripted habit that often
    (KeyChain: answering with the key a pointer names; Calculator: evaluating ``a + b * c`` left to
    right; a text world: :attr:`~agentgym.envs.text.TextGameEnv.idle_command` before a step),
    failed demonstrations included, so the start has a habit that RL can unlearn:
    sampling still takes the right path on the rest, and that is rewarded.

    ``min_start_success`` > 0 makes the start check itself: after each round of ``epochs`` it is
    sampled (at the config's temperature, as RL samples) on ``check_tasks`` train tasks that the SFT
    never saw (ids after its ``tasks``; never the held-out split), and a start below the bar trains
    another round from where it is, up to ``max_rounds``; then :class:`WarmStartFailed`. RL cannot
    learn from a start whose samples never succeed. The rounds are recorded in
    ``out/warm_start.json`` with the settings: a later call with the same settings reuses the start
    (or raises again if it failed), one with other settings builds it anew.
    """
    from transformers import AutoTokenizer

    from agentgym.models import tiny_model_path

    if max_rounds < 1 or not 0.0 <= min_start_success <= 1.0:
        raise ValueError(
            f"max_rounds must be >= 1 and min_start_success in [0, 1], got {max_rounds}, {min_start_success}"
        )
    target = Path(out)
    base = base or tiny_model_path()
    settings = {
        "base": str(base),
        "env_id": str(config["env_id"]),
        "env_kwargs": config["env_kwargs"],
        "tasks": tasks,
        "epochs": epochs,
        "learning_rate": learning_rate,
        "seed": seed,
        "mistake_rate": mistake_rate,
        "min_start_success": min_start_success,
        "check_tasks": check_tasks,
        "max_rounds": max_rounds,
    }
    record_path = target / WARM_START_RECORD
    if record_path.exists() and (target / "model.safetensors").exists():
        record = json.loads(record_path.read_text())
        if record.get("settings") == json.loads(json.dumps(settings, default=str)):
            _raise_if_failed(target, record)
            return target
    # Made as the config makes it (an env without demonstrations may not list splits): any task id of a
    # generated catalog is scriptable, listed or not.
    scripted = make_env_factory(config["env_id"], config["env_kwargs"])()
    try:
        script = getattr(scripted.unwrapped, "demonstration_replies", None)
        if script is None:
            raise ValueError(
                f"{config['env_id']} does not script demonstrations (no demonstration_replies method; KeyChain, "
                "Calculator and the text worlds do): train a start with sft_warm_start and set `model:` to it"
            )
        env_kwargs, train_ids = split_tasks(config, "train", tasks)
        check_kwargs, check_ids = (
            split_tasks(config, "train", check_tasks, skip=tasks) if min_start_success else ({}, [])
        )
        rng = random.Random(seed)
        replies = {task_id: script(task_id, mistake_rate, rng) for task_id in train_ids}
    finally:
        scripted.close()
    record_path.unlink(missing_ok=True)  # the model is about to change: an old record must not vouch for it
    trajectories = demonstrations(
        make_env_factory(config["env_id"], env_kwargs),
        list(replies),
        replies.__getitem__,
        AutoTokenizer.from_pretrained(base),
        agent_config(config, greedy=True),
    )
    dataset = demonstration_dataset(trajectories, failures=mistake_rate > 0)
    rounds: list[dict] = []
    for number in range(1, max_rounds + 1):
        # Later rounds continue from the last one's weights (a fresh cosine cycle): the copying skill
        # appears abruptly with training, so a start short of it needs more steps, not another draw.
        sft_warm_start(
            target if rounds else base,
            dataset,
            target,
            epochs=epochs,
            learning_rate=learning_rate,
            seed=seed + number - 1,
        )
        entry = {"round": number, "epochs": epochs, **_losses(target)}
        if min_start_success > 0:
            entry["check_success"] = success_rate(
                target,
                make_env_factory(config["env_id"], check_kwargs),
                check_ids,
                agent_config(config, greedy=False),
            )
        rounds.append(entry)
        if entry.get("check_success", 1.0) >= min_start_success:
            break
    record = {"settings": settings, "rounds": rounds}
    record_path.write_text(json.dumps(record, indent=2, default=str))
    _raise_if_failed(target, record)
    return target


def _raise_if_failed(target: Path, record: dict) -> None:
    settings, last = record["settings"], record["rounds"][-1]
    if last.get("check_success", 1.0) < settings["min_start_success"]:
        raise WarmStartFailed(
            f"the SFT start in {target} solved {last['check_success']:.0%} of {settings['check_tasks']} unseen train "
            f"tasks when sampled after {len(record['rounds'])} round(s) of {settings['epochs']:g} epochs (needs "
            f"{settings['min_start_success']:.0%}): raise epochs, tasks or max_rounds"
        )


def _losses(model_dir: Path) -> dict:
    """The first and last logged training losses of the SFT run saved in ``model_dir``."""
    history = json.loads((model_dir / "trainer_state.json").read_text())["log_history"]
    losses = [entry["loss"] for entry in history if "loss" in entry]
    return {"first_loss": losses[0], "final_loss": losses[-1]}


def held_out_tasks(
    model: str | Path, config: dict, count: int = 100, greedy: bool = True, split: str = "heldout"
) -> dict[str, float]:
    """Each of the first ``count`` tasks' success by ``model`` on the config's env's held-out ``split`` (KeyChain's
    and Calculator's ``heldout``, the text worlds' ``test``), greedy or at the config's temperature."""
    env_kwargs, heldout = split_tasks(config, split, count)  # distinct ids
    played = _episodes(
        model, make_env_factory(config["env_id"], env_kwargs), heldout, agent_config(config, greedy=greedy)
    )
    return {trajectory.task_id: float(trajectory.success) for trajectory in played}


def held_out_success(
    model: str | Path, config: dict, count: int = 100, greedy: bool = True, split: str = "heldout"
) -> float:
    """The fraction of :func:`held_out_tasks` that ``model`` solves."""
    return math.fsum(held_out_tasks(model, config, count, greedy, split).values()) / count


def task_categories(config: dict, task_ids: Sequence[str]) -> dict[str, str]:
    """Each of ``task_ids``' category (:attr:`Task.category <agentgym.task.Task.category>`) in the config's env."""
    env = make_env_factory(config["env_id"], {**config["env_kwargs"], "tasks": list(task_ids)})()
    try:
        categories = {task.id: task.category for task in env.unwrapped.tasks()}
    finally:
        env.close()
    return {task_id: categories[task_id] for task_id in task_ids}
