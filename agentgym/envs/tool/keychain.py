"""KeyChain: a tiny multi-turn lookup env (follow key pointers to a number, then submit it), small enough to learn on CPU.

A task hides a number behind a chain of 1–``max_hops`` keys: ``lookup("frost")`` answers
``frost: see "amber"`` or ``amber: 42``; the agent submits the number with ``submit("42")``.
Reward 1 on the right number, else 0. The episode has 2–``max_hops + 1`` turns, each needing a
key copied from the last observation, so a policy gets per-turn credit to learn from, and
:func:`demonstration` gives the scripted solution (for SFT warm starts).

``step_latency`` (seconds, median) makes every lookup take a long-tailed time (lognormal,
σ = 1.5, capped at 20× the median), so episode durations are long-tailed: a stand-in for slow
envs, for measuring asynchronous pipelines. Each episode draws its latencies from the env's
RNG (``reset(seed=...)`` reproduces them), so episodes of one task differ as real ones do.

Tasks are generated from their id (``"<split>-<n>"``), so ``"train"`` and ``"heldout"`` are
disjoint and reproducible without any data files. ``split`` and ``num_tasks`` say which ids the
env lists; ``tasks=`` selects others or fewer (ids of either split, or a pattern over the listed
ones).
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Sequence

from agentgym.core import select_tasks
from agentgym.envs.tool.env import ToolEnv
from agentgym.envs.tool.generated import GeneratedTasks, task_ids, task_rng
from agentgym.task import Task

__all__ = ["KEYS", "KeyChainEnv", "demonstration", "make_task", "task_ids"]

KEYS = ("amber", "brick", "cloud", "delta", "ember", "frost", "grape", "honey")


def make_task(task_id: str, max_hops: int = 2) -> dict:
    """The task ``"<split>-<n>"``: its start key, the table of entries, the answer and the number of hops."""
    rng = task_rng(task_id)
    hops = rng.randint(1, max_hops)
    chain = rng.sample(KEYS, hops)
    answer = str(rng.randint(10, 99))
    # Keys are quoted as they are passed to lookup("..."), so they tokenize the same in the text
    # and in the call (a BPE splits " amber" and "amber" differently): copying them is learnable.
    table = {key: f'see "{nxt}"' for key, nxt in zip(chain, chain[1:])}
    table[chain[-1]] = answer
    for key in KEYS:  # distractors: the other keys hold other numbers
        table.setdefault(key, str(rng.randint(10, 99)))
    return {
        "prompt": f'Find the number stored under "{chain[0]}". Use lookup(key); an entry may point to another '
        f"key. Then submit(answer).",
        "start": chain[0],
        "table": table,
        "answer": answer,
        "hops": hops,
    }


def demonstration(task: dict, mistake_rate: float = 0.0, rng: random.Random | None = None) -> list[str]:
    """The scripted solution's replies: one lookup per hop, then the submit (each task's reference solution in ``KeyChainEnv.tasks()``).

    ``mistake_rate`` > 0 scripts a worse demonstrator with the premature-answer habit of real
    agents: at each entry that points to another key it stops, with that probability (drawn from
    ``rng``), and submits that key, the intermediate result, instead of looking it up. Every
    reply still copies a key or number from the last observation, as the solution's do.
    """
    if mistake_rate and rng is None:
        raise ValueError("an early-answering demonstration needs an rng to draw its choices from")
    replies, key = [], task["start"]
    while True:
        replies.append(f'lookup("{key}")')
        entry = task["table"][key]
        if not entry.startswith("see "):
            return replies + [f'submit("{entry}")']
        key = entry[len("see ") :].strip('"')
        if mistake_rate and rng is not None and rng.random() < mistake_rate:
            return replies + [f'submit("{key}")']


def lookup(key: str, state: dict) -> str:
    """Read the entry stored under a key."""
    if state["latency"]:
        time.sleep(state["latency"] * min(state["rng"].lognormvariate(0.0, 1.5), 20.0))
    if key not in state["table"]:
        raise KeyError(f"no key {key!r}; keys are {', '.join(KEYS)}")
    return f"{key}: {state['table'][key]}"


def _check(task: dict, state: dict, transcript: list) -> tuple[float, bool]:
    answers = [c["arguments"].get("answer") for c in transcript if c["tool"] == "submit"]
    ok = bool(answers) and str(answers[-1]).strip() == task["answer"]
    return float(ok), ok


class KeyChainEnv(ToolEnv):
    """Follow key pointers to a number and submit it (see the module docstring).

    Args:
        split: the tasks ``reset()`` draws from when no task id is given (``"train"`` or ``"heldout"``).
        num_tasks: how many tasks of that split are listed.
        max_hops: the longest pointer chain.
        max_turns: replies before the episode is truncated.
        step_latency: median seconds a lookup takes (long-tailed; 0: instant).
        tasks: task ids of either split, or a pattern over the listed ones (default: the listed ones).
    """

    def __init__(
        self,
        split: str = "train",
        num_tasks: int = 200,
        max_hops: int = 2,
        max_turns: int = 6,
        step_latency: float = 0.0,
        tasks: str | Sequence[str] | None = None,
        **kwargs,
    ):
        catalog = GeneratedTasks(task_ids(split, num_tasks), functools.partial(make_task, max_hops=max_hops))
        catalog.listed = select_tasks(catalog, tasks)
        super().__init__(
            [lookup],
            catalog,
            state_factory=lambda task: {"table": dict(task["table"]), "latency": step_latency},
            check=_check,
            max_turns=max_turns,
            call_timeout=None,
            allow_text_replies=False,
            variant=f"keychain-{max_hops}",
            **kwargs,
        )

    def tasks(self) -> list[Task]:
        """The listed tasks (category: their split), each with :func:`demonstration` as its reference solution."""
        tasks = []
        for task_id in self.task_ids():
            task = self.task_data[task_id]
            split = task_id.rpartition("-")[0]
            tasks.append(Task(task_id, task["prompt"], split, {"hops": task["hops"]}, demonstration(task)))
        return tasks

    def demonstration_replies(
        self, task_id: str, mistake_rate: float = 0.0, rng: random.Random | None = None
    ) -> list[str]:
        """:func:`demonstration` of a task by id; its mistake is the early answer (see there). SFT warm starts call this."""
        return demonstration(self.task_data[task_id], mistake_rate, rng)

    def _setup(self, task_id: str) -> str:
        prompt = super()._setup(task_id)
        # Drawn per episode, not per task: a task's episodes must not all be slow together.
        self.state["rng"] = random.Random(int(self.np_random.integers(2**63)))
        return prompt
