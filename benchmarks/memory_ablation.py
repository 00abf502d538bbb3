"""Ablation of pre-storage skill validation on KeyChain: success with no bank, with an unvalidated bank (every candidate stored), and with the validated bank.

**The fixed policy is not a language model.** No hosted LLM or pretrained model is reachable
here, and the locally built tiny model cannot read instructions, so the policy is a scripted
*procedure follower* (:class:`ProcedureFollower`) that genuinely conditions on its prompt:

* if the memory block of its first message holds skills, it follows the first skill's
  procedure step by step (each step line resolved against the task statement and the newest
  observation with :func:`agentgym.memory.induction.resolve_step`; a step that does not
  resolve is skipped), and when that procedure is used up, the next skill's, replayed as if
  followed from the start (:func:`agentgym.memory.induction.follow_any`);
* otherwise — no skill, or every procedure used up — it acts with a weak random heuristic:
  submit a number seen in the newest observation (probability 0.5 when there is one), else
  look up a random word of the task statement or the newest observation, and now and then
  (probability 0.05) guess a random two-digit number.

It is deterministic given ``--seed`` and each episode's reset seed (its random draws depend
on those, the task statement and the turn), so the "with" and "without" groups of a validation
see the same random draws: the pairs differ only by the candidate skill.

The pipeline (all on ``train`` tasks; the final comparison on disjoint ``heldout`` tasks):

1. explore: the follower with an empty bank in ``learn`` mode writes episodic memories;
2. induce: :class:`~agentgym.memory.induction.RuleBasedDistiller` turns every distinct successful
   procedure into a candidate (``min_support=1``: lucky episodes give candidates too);
3. unvalidated bank: every candidate stored;
4. validated bank: candidates in order of support, each admitted only if the matched groups
   (same tasks, seeds and retrieved context, with vs. without it) show a gain whose one-sided
   lower confidence bound exceeds ``--margin``;
5. evaluate the three conditions on the same heldout tasks and seeds.

    .venv/bin/python benchmarks/memory_ablation.py [--seed 0] [--explore 300] [--validate-tasks 40]
        [--validate-seeds 2] [--eval-tasks 200] [--margin 0.0] [--confidence 0.9]
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import random
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentgym.envs.tool.keychain import KeyChainEnv  # noqa: E402
from agentgym.memory.bank import MemoryBank, procedures_in_prompt, split_prompt  # noqa: E402
from agentgym.memory.induction import RuleBasedDistiller, follow_any  # noqa: E402
from agentgym.memory.validation import admit_candidates, paired_gain, validate_candidate  # noqa: E402
from agentgym.memory.wrapper import MemoryWrapper  # noqa: E402
from agentgym.rollout.agent import Agent, AgentConfig, Episode  # noqa: E402
from agentgym.rollout.chat import Message  # noqa: E402
from agentgym.rollout.policy import Completion, Policy, SamplingParams  # noqa: E402
from agentgym.rollout.runner import EpisodeRequest, Runner, RunnerConfig  # noqa: E402

POLICY_LABEL = (
    "procedure follower (scripted, not a language model): follows the skills in its prompt in order, "
    "else a weak random heuristic"
)
EPISODE_SEED: contextvars.ContextVar[int] = contextvars.ContextVar("episode_seed", default=0)
_WORD = re.compile(r"\b[a-z]{3,}\b")
_NUMBER = re.compile(r"\b\d+\b")


class SeededAgent(Agent):
    """An Agent that publishes the episode's reset seed to the follower while it samples (its draws depend on it)."""

    async def sample(self, episode: Episode, sampling: SamplingParams | None = None) -> Completion:
        token = EPISODE_SEED.set(int(episode.metadata.get("seed") or 0))
        try:
            return await super().sample(episode, sampling)
        finally:
            EPISODE_SEED.reset(token)


class ProcedureFollower(Policy):
    """The scripted follower described in the module docstring (chat mode; replies in call syntax)."""

    name = "procedure-follower"

    def __init__(self, seed: int = 0, guess: float = 0.05):
        self.seed = seed
        self.guess = guess

    async def chat(self, messages: Sequence[Message], tools: list[dict] | None, sampling: SamplingParams) -> Completion:
        users = [m for m in messages if m["role"] != "system"]
        prompt = str(users[0]["content"])
        _, task = split_prompt(prompt)
        procedures = procedures_in_prompt(prompt)
        # The observation each turn saw (turn 0: none), rebuilt from the conversation.
        observations = [""] + [str(m["content"]) for m in users[1:] if m["role"] in ("user", "tool")]
        action = follow_any(procedures, task, observations)
        if action is None:
            turn = len(observations) - 1
            action = self._heuristic(task, observations[turn], turn)
        args = ", ".join(json.dumps(str(v)) for v in action["arguments"].values())
        return Completion(text=f"{action['name']}({args})", policy_version=self.version)

    def _heuristic(self, task: str, last: str, turn: int) -> dict:
        rng = random.Random(f"{self.seed}:{EPISODE_SEED.get()}:{task}:{turn}")
        numbers = _NUMBER.findall(last)
        if rng.random() < self.guess:
            return {"name": "submit", "arguments": {"answer": str(rng.randint(10, 99))}}
        if numbers and rng.random() < 0.5:
            return {"name": "submit", "arguments": {"answer": rng.choice(numbers)}}
        words = sorted(set(_WORD.findall(task.lower() + " " + last.lower())))
        return {"name": "lookup", "arguments": {"key": rng.choice(words)}}


def tasks(split: str, count: int, seeds: int, base_seed: int) -> list[EpisodeRequest]:
    """``count`` tasks × ``seeds`` reset seeds, every episode its own seed (KeyChain has only 8 distinct statements)."""
    return [
        EpisodeRequest(f"{split}-{i}", seed=base_seed * 1_000_000 + i * 100 + s, repeat=s)
        for i in range(count)
        for s in range(seeds)
    ]


async def rewards(agent: Agent, factory, work: list[EpisodeRequest]) -> list[float]:
    result = await Runner(agent, factory, RunnerConfig(concurrency=8, progress=False)).run(work)
    by_key = {(r.task_id, r.metadata["repeat"]): r.reward for r in result.records}
    return [by_key[(t.task_id, t.repeat)] for t in work]


async def main_async(args) -> dict:
    agent = SeededAgent(ProcedureFollower(args.seed), AgentConfig(system_prompt=None, native_tools=False))

    def make_env(split: str = "train"):
        return KeyChainEnv(split=split, num_tasks=1000, max_hops=args.max_hops, max_turns=args.max_turns)

    folder = Path(tempfile.mkdtemp(prefix="memory-ablation-"))
    explore_bank = MemoryBank(folder / "explore.db")
    started = time.perf_counter()
    # 1. explore (no skills yet: the heuristic alone), writing episodes
    explored = await rewards(
        agent,
        lambda: MemoryWrapper(make_env(), explore_bank, mode="learn", k_episodes=0),
        tasks("train", args.explore, 1, args.seed),
    )
    # 2. induce
    candidates = RuleBasedDistiller(min_support=1).distill(explore_bank.episode_records())
    candidates.sort(key=lambda d: -d.support)
    # 3. unvalidated bank: everything stored
    unvalidated = MemoryBank(folder / "unvalidated.db")
    for draft in candidates:
        unvalidated.add_skill(draft)
    # 4. validated bank
    validated = MemoryBank(folder / "validated.db")
    validation_tasks = tasks("train", args.validate_tasks, args.validate_seeds, args.seed + 1)
    admitted = await admit_candidates(
        candidates,
        validated,
        agent,
        make_env,
        validation_tasks,
        margin=args.margin,
        confidence=args.confidence,
        k_episodes=0,
    )
    empty = MemoryBank(folder / "empty.db")
    decisions = []
    for draft, estimate, skill_id in admitted:
        # For the report only: the candidate's gain on its own (empty context), which shows the harmful ones.
        alone = await validate_candidate(
            draft, empty, agent, make_env, validation_tasks, confidence=args.confidence, k_episodes=0
        )
        decisions.append(
            {
                "skill": draft.name,
                "steps": draft.steps,
                "support": draft.support,
                "gain": round(estimate.gain, 3),
                "lower": round(estimate.lower, 3),
                "admitted": skill_id is not None,
                "gain_alone": round(alone.gain, 3),
            }
        )
    # 5. evaluate on heldout tasks, same seeds for every condition
    work = tasks("heldout", args.eval_tasks, 1, args.seed + 2)
    conditions = {
        "no bank": lambda: make_env("heldout"),
        "unvalidated bank": lambda: MemoryWrapper(make_env("heldout"), unvalidated, mode="read", k_episodes=0),
        "validated bank": lambda: MemoryWrapper(make_env("heldout"), validated, mode="read", k_episodes=0),
    }
    results = {name: await rewards(agent, factory, work) for name, factory in conditions.items()}
    base = results["no bank"]
    rows = []
    for name, values in results.items():
        row = {"condition": name, "episodes": len(values), "success": sum(values) / len(values)}
        if name != "no bank":
            estimate = paired_gain(values, base, args.confidence)
            row.update(gain_vs_no_bank=estimate.gain, lower_bound=estimate.lower)
        rows.append(row)
    return {
        "policy": POLICY_LABEL,
        "env": f"KeyChainEnv(max_hops={args.max_hops}, max_turns={args.max_turns})",
        "seed": args.seed,
        "explore_episodes": len(explored),
        "explore_success": sum(explored) / len(explored),
        "candidates": len(candidates),
        "admitted": sum(d["admitted"] for d in decisions),
        "validation": {
            "tasks": args.validate_tasks,
            "seeds_per_task": args.validate_seeds,
            "margin": args.margin,
            "confidence": args.confidence,
            "method": "paired-t lower bound",
        },
        "decisions": decisions,
        "rows": rows,
        "wall_s": round(time.perf_counter() - started, 1),
        "stores": str(folder),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--explore", type=int, default=300, help="exploration episodes (train tasks)")
    parser.add_argument("--validate-tasks", type=int, default=40, help="train tasks per validation")
    parser.add_argument("--validate-seeds", type=int, default=2, help="reset seeds per validation task")
    parser.add_argument("--eval-tasks", type=int, default=200, help="heldout tasks per condition")
    parser.add_argument("--margin", type=float, default=0.0)
    parser.add_argument("--confidence", type=float, default=0.9)
    parser.add_argument("--max-hops", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=6)
    args = parser.parse_args()
    report = asyncio.run(main_async(args))
    print(f"policy: {report['policy']}\nenv: {report['env']}  seed: {report['seed']}")
    print(
        f"explore: {report['explore_episodes']} episodes, success {report['explore_success']:.1%}; "
        f"{report['candidates']} candidate skills, {report['admitted']} admitted "
        f"(margin {args.margin}, {args.confidence:.0%} one-sided paired-t, "
        f"{args.validate_tasks} tasks x {args.validate_seeds} seeds)"
    )
    print("gain = marginal gain over the skills already admitted (what decides); gain alone = over an empty context")
    print("| candidate | support | gain | lower bound | admitted | gain alone |\n|---|---:|---:|---:|---|---:|")
    for d in report["decisions"]:
        print(
            f"| {' ; '.join(d['steps'])} | {d['support']} | {d['gain']:+.3f} | {d['lower']:+.3f} | {d['admitted']} "
            f"| {d['gain_alone']:+.3f} |"
        )
    print("\n| condition | heldout episodes | success | gain vs no bank | lower bound |\n|---|---:|---:|---:|---:|")
    for row in report["rows"]:
        extra = f"{row['gain_vs_no_bank']:+.3f} | {row['lower_bound']:+.3f}" if "gain_vs_no_bank" in row else "- | -"
        print(f"| {row['condition']} | {row['episodes']} | {row['success']:.1%} | {extra} |")
    print(json.dumps({"benchmark": "memory_ablation", **report}))


if __name__ == "__main__":
    main()
