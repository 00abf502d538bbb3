"""Skill induction: episode records, rule-based episode summaries, and summarizers that turn contrasting trajectories into candidate skills.

An :class:`EpisodeRecord` is what memory keeps of one episode: the task statement, each step's
tool calls, observation, reward and error, and the outcome. The :class:`~agentgym.memory.wrapper.MemoryWrapper`
writes one per episode; :func:`episode_record` makes one from a stored Trajectory.

A candidate skill (:class:`SkillDraft`) is a name, when to use it, a procedure (a list of step
lines) and notes on what failed. Steps are *executable templates* in a small documented
language, so that a skill read from a prompt can be followed step by step:

* ``lookup(key="amber")`` — a literal call (JSON argument values);
* ``lookup(key=<word after "see" in the last observation>)`` — a slot: the word that follows
  the anchor word in the task statement (``in the task``) or in the newest observation;
* ``submit(answer=<last number in the last observation>)`` — also ``first``; ``word`` or ``number``.

:func:`abstract_value` turns a concrete argument into a slot when the value can be read back
from the task or the previous observation with such a rule, and leaves it literal otherwise (a
guessed number stays literal: a skill distilled from a lucky guess is specific and usually
harmful — which is what validation is for). :func:`resolve_value` reads a slot back.

Summarizers (the :class:`Summarizer` protocol) are pluggable:

* :class:`RuleBasedDistiller` — no model: groups episodes by (env, task family), abstracts each
  success into a procedure, merges identical procedures, and adds the steps seen only in failures
  as "avoid" notes (contrast of successes and failures);
* :class:`PolicySummarizer` — any agentgym :class:`~agentgym.rollout.policy.Policy` (the policy
  being trained, or an :class:`~agentgym.rollout.openai_policy.OpenAIPolicy` endpoint) prompted
  with the same contrast and asked for JSON; unusable output yields no candidates, never an error.
"""

from __future__ import annotations

import collections
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agentgym.core import AgentEnv
    from agentgym.rollout.policy import Policy, SamplingParams
    from agentgym.rollout.trajectory import Trajectory

__all__ = [
    "EpisodeRecord",
    "PolicySummarizer",
    "RuleBasedDistiller",
    "SkillDraft",
    "Summarizer",
    "abstract_value",
    "episode_record",
    "family_of",
    "follow",
    "follow_any",
    "inert",
    "parse_step",
    "render_call",
    "resolve_step",
    "resolve_value",
    "step_entry",
    "summarize_episode",
]

logger = logging.getLogger(__name__)

OBSERVATION_CHARS = 400  # what a record keeps of each observation: enough to summarize and abstract
# Every character str.splitlines() ends a line at: what a prompt's reader (a parser or a model) takes as one.
_LINE_BREAKS = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_MARKER_RUN = re.compile("={3,}")


def inert(text: str) -> str:
    """Text an episode wrote, made safe to put on one line of a prompt's memory block: no line breaks (so it
    cannot start a line of its own: a marker, ``Procedure:``, a numbered step) and no run of three ``=`` (the
    block's markers are ``=== ... ===``). Everything else is kept as written, spaces included, so a step's
    literal values stay exact."""
    return _MARKER_RUN.sub(lambda run: " ".join(run.group()), _LINE_BREAKS.sub(" ", text))


def family_of(task_id: str) -> str:
    """The task family: the id without its trailing number (``"train-12"`` → ``"train"``, ``"HumanEval/3"`` → ``"HumanEval"``)."""
    family = re.sub(r"[-_/.:]?\d+$", "", task_id)
    return family or task_id


@dataclass
class EpisodeRecord:
    """One episode as memory keeps it. ``steps`` items: ``{"calls": [{"name", "arguments"}], "observation", "reward", "error"}``."""

    env: str
    task_id: str
    task: str
    steps: list[dict] = field(default_factory=list)
    reward: float = 0.0
    success: bool = False
    truncated: bool = False
    family: str = ""
    skills: list[int] = field(default_factory=list)  # ids of the skills that were in the prompt
    source: str = ""  # e.g. the trajectory id

    def __post_init__(self):
        self.family = self.family or family_of(self.task_id)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> EpisodeRecord:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


def step_entry(parsed_calls: Sequence[Any], observation: str, reward: float, error: str | None) -> dict:
    """One step of an :class:`EpisodeRecord` from the env's parsed calls (``ToolCall`` s) and what it answered."""
    return {
        "calls": [{"name": c.name, "arguments": dict(c.arguments or {})} for c in parsed_calls if c.ok],
        "observation": observation[:OBSERVATION_CHARS],
        "reward": float(reward),
        "error": error,
    }


def episode_record(trajectory: Trajectory, env: AgentEnv, task: str | None = None) -> EpisodeRecord:
    """An :class:`EpisodeRecord` of a stored trajectory; ``env`` (of the trajectory's kind) parses its replies."""
    steps = [
        step_entry(env.parse(turn.action).calls, turn.observation, turn.reward, turn.info.get("error"))
        for turn in trajectory.turns
    ]
    return EpisodeRecord(
        env=trajectory.env_id,
        task_id=trajectory.task_id,
        task=task if task is not None else trajectory.initial_observation,
        steps=steps,
        reward=trajectory.reward,
        success=trajectory.success,
        truncated=trajectory.truncated,
        source=trajectory.id,
    )


# --------------------------------------------------------------------------- the step language
_TOKEN = re.compile(r"[A-Za-z_]+|\d+(?:\.\d+)?")
_SLOT = re.compile(
    r'<(?:(?P<shape>word|number) after "(?P<after>[^"]+)"|(?P<which>first|last) (?P<shape2>word|number))'
    r" in (?P<source>the task|the last observation)>"
)
_STEP = re.compile(r"^\s*(?:\d+[.)]\s*)?(?P<tool>[A-Za-z_]\w*)\((?P<args>.*)\)\s*$")
_ARG = re.compile(r'\s*(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<value><[^>]*>|"(?:[^"\\]|\\.)*"|[^,]+)\s*(?:,|$)')
SOURCES = {"task": "the task", "last": "the last observation"}


def _is_number(text: str) -> bool:
    return bool(re.fullmatch(r"\d+(?:\.\d+)?", text))


def _slot_text(source: str, shape: str, *, after: str | None = None, which: str | None = None) -> str:
    where = SOURCES[source]
    return f'<{shape} after "{after}" in {where}>' if after is not None else f"<{which} {shape} in {where}>"


def _read_slot(match: re.Match, task: str, last: str) -> str | None:
    text = task if match["source"] == "the task" else last
    tokens = _TOKEN.findall(text)
    shape = match["shape"] or match["shape2"]
    fits = _is_number if shape == "number" else (lambda t: not _is_number(t))
    if match["after"] is not None:
        anchor = match["after"].lower()
        for before, token in zip(tokens, tokens[1:]):
            if before.lower() == anchor and fits(token):
                return token
        return None
    candidates = [t for t in tokens if fits(t)]
    if not candidates:
        return None
    return candidates[0] if match["which"] == "first" else candidates[-1]


def resolve_value(value: str, task: str, last: str) -> Any:
    """A rendered argument value read against the task and the last observation.

    A slot gives the token it reads (a string), or None when it does not resolve; a JSON
    literal keeps its type (so integer arguments stay integers); anything else is taken as text.
    """
    match = _SLOT.fullmatch(value.strip())
    if match:
        return _read_slot(match, task, last)
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value.strip()


def abstract_value(value: Any, task: str, last: str) -> str:
    """The most general rendering of an argument value: a slot that reads it back from the last observation or the task, else a JSON literal."""
    text = str(value)
    for source, haystack in (("last", last), ("task", task)):
        tokens = _TOKEN.findall(haystack)
        if text not in tokens:
            continue
        shape = "number" if _is_number(text) else "word"
        # Position rules first: an anchor word is often itself task-specific ("amber: 42").
        slots = [_slot_text(source, shape, which="last"), _slot_text(source, shape, which="first")]
        index = tokens.index(text)
        if index > 0 and not _is_number(tokens[index - 1]):
            slots.append(_slot_text(source, shape, after=tokens[index - 1].lower()))
        for slot in slots:  # the first rule that reads exactly this value back
            if resolve_value(slot, task, last) == text:
                return slot
    return json.dumps(value)


def render_call(name: str, arguments: dict, task: str, last: str) -> str:
    """A tool call as a step line, each argument abstracted (see :func:`abstract_value`)."""
    args = ", ".join(f"{key}={abstract_value(value, task, last)}" for key, value in arguments.items())
    return f"{name}({args})"


def parse_step(line: str) -> tuple[str, list[tuple[str, str]]] | None:
    """A step line as ``(tool, [(argument, rendered value), ...])``, or None if it is not a step."""
    match = _STEP.match(line)
    if not match:
        return None
    args_text = match["args"].strip()
    args, position = [], 0
    while position < len(args_text):
        arg = _ARG.match(args_text, position)
        if not arg:
            return None
        args.append((arg["name"], arg["value"].strip()))
        position = arg.end()
    return match["tool"], args


def resolve_step(line: str, task: str, last: str) -> dict | None:
    """A step line as a concrete call ``{"name", "arguments"}`` for this task and observation; None if it cannot be made concrete."""
    parsed = parse_step(line)
    if parsed is None:
        return None
    tool, args = parsed
    arguments = {}
    for name, value in args:
        concrete = resolve_value(value, task, last)
        if concrete is None:
            return None
        arguments[name] = concrete
    return {"name": tool, "arguments": arguments}


def follow(steps: Sequence[str], task: str, observations: Sequence[str]) -> dict | None:
    """The call a procedure prescribes now, or None once it is used up.

    ``observations[j]`` is what turn j saw before replying ("" for the first turn); the current
    turn is the last. Each turn takes the next step that resolves in its context, skipping those
    that do not (a two-hop procedure on a one-hop task skips its second lookup). Replaying from
    the first turn keeps the follower stateless: the conversation alone fixes where it is.
    """
    position, call = 0, None
    for observation in observations:
        call = None
        while position < len(steps) and call is None:
            call = resolve_step(steps[position], task, observation)
            position += 1
    return call


def follow_any(procedures: Sequence[Sequence[str]], task: str, observations: Sequence[str]) -> dict | None:
    """The call of the first procedure, in the order shown, that still prescribes one (see :func:`follow`).

    Each procedure is replayed as if it had been followed from the first turn, so a later one
    takes over where an earlier one is used up (a one-hop skill that cannot submit after
    ``"cloud: see amber"`` falls through to a two-hop skill whose next step is the second lookup).
    """
    for steps in procedures:
        call = follow(steps, task, observations)
        if call is not None:
            return call
    return None


# --------------------------------------------------------------------------- summaries
def _call_text(call: dict) -> str:
    return f"{call['name']}({', '.join(f'{k}={json.dumps(v)}' for k, v in call['arguments'].items())})"


def failure_cause(record: EpisodeRecord) -> str | None:
    """Why an episode failed, from its steps (None for a success)."""
    if record.success:
        return None
    if not record.steps:
        return "no step was taken"
    last = record.steps[-1]
    if last.get("error"):
        return f"the last reply was rejected: {last['error']}"
    calls = [c for step in record.steps for c in step["calls"]]
    if record.truncated:
        return f"ran out of turns after {len(record.steps)} replies without finishing"
    if calls:
        return f"the task was judged unsolved after {_call_text(calls[-1])}"
    return "the episode ended without a valid tool call"


def summarize_episode(record: EpisodeRecord, max_steps: int = 8) -> tuple[str, str]:
    """A rule-based ``(title, text)`` summary: task, key steps, outcome and failure cause."""
    title = record.task.strip().splitlines()[0][:120] if record.task.strip() else record.task_id
    steps = []
    for number, step in enumerate(record.steps[:max_steps], 1):
        calls = "; ".join(_call_text(c) for c in step["calls"]) or "(no valid call)"
        observation = " ".join(step["observation"].split())[:120]
        steps.append(f"{number}. {calls} -> {observation}")
    if len(record.steps) > max_steps:
        steps.append(f"... {len(record.steps) - max_steps} more steps")
    outcome = "success" if record.success else "failure"
    lines = [
        f"Task ({record.task_id}): {' '.join(record.task.split())[:300]}",
        "Key steps:",
        *steps,
        f"Outcome: {outcome} (reward {record.reward:g}, {len(record.steps)} steps)",
    ]
    cause = failure_cause(record)
    if cause:
        lines.append(f"Failure cause: {cause}")
    return title, "\n".join(lines)


# --------------------------------------------------------------------------- candidate skills
@dataclass
class SkillDraft:
    """A candidate skill, before validation: what it is for, its procedure and where it came from."""

    name: str
    when: str
    steps: list[str]
    env: str = ""
    family: str = ""
    avoid: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    support: int = 1  # how many source episodes show this procedure

    def render(self) -> str:
        """The skill as prompt text (what retrieval indexes and what a policy reads); every part that came from
        episodes is :func:`inert`, so no episode can add lines (steps, markers) of its own."""
        steps = (f"{i}. {inert(s)}" for i, s in enumerate(self.steps, 1))
        lines = [f"When to use: {inert(self.when)}", "Procedure:", *steps]
        if self.avoid:
            lines += ["Avoid (seen only in failed attempts):", *(f"- {inert(a)}" for a in self.avoid)]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return asdict(self)


def procedure(record: EpisodeRecord) -> list[str]:
    """An episode's calls as step lines, each argument abstracted against the task and the observation before it."""
    steps, last = [], ""
    for step in record.steps:
        for call in step["calls"]:
            steps.append(render_call(call["name"], call["arguments"], record.task, last))
        last = step["observation"]
    return steps


def common_words(texts: Sequence[str]) -> str:
    """The words of the first text that every text has, gaps shown as "…" (a family's shared task statement)."""
    if not texts:
        return ""
    vocabularies = [set(t.split()) for t in texts[1:]]
    out: list[str] = []
    for word in texts[0].split():
        if all(word in v for v in vocabularies):
            out.append(word)
        elif not out or out[-1] != "…":
            out.append("…")
    return " ".join(out)


class Summarizer(Protocol):
    """Turns episode records into summaries and candidate skills."""

    async def summarize(self, record: EpisodeRecord) -> tuple[str, str]:
        """``(title, text)`` of one episode."""

    async def induce(self, records: Sequence[EpisodeRecord]) -> list[SkillDraft]:
        """Candidate skills from contrasting the successes and failures among ``records``."""


class RuleBasedDistiller:
    """The model-free summarizer (see the module docstring). ``min_support``: successes needed to propose a procedure."""

    def __init__(self, min_support: int = 1, max_avoid: int = 3):
        self.min_support = min_support
        self.max_avoid = max_avoid

    async def summarize(self, record: EpisodeRecord) -> tuple[str, str]:
        return summarize_episode(record)

    async def induce(self, records: Sequence[EpisodeRecord]) -> list[SkillDraft]:
        return self.distill(records)

    def distill(self, records: Sequence[EpisodeRecord]) -> list[SkillDraft]:
        groups: dict[tuple[str, str], list[EpisodeRecord]] = collections.defaultdict(list)
        for record in records:
            groups[(record.env, record.family)].append(record)
        drafts = []
        for (env, family), group in groups.items():
            successes = [r for r in group if r.success]
            failures = [r for r in group if not r.success]
            success_steps = {s for r in successes for s in procedure(r)}
            avoid = collections.Counter(s for r in failures for s in set(procedure(r)) if s not in success_steps)
            avoid_lines = [step for step, _ in avoid.most_common(self.max_avoid)]
            by_procedure: dict[tuple[str, ...], list[EpisodeRecord]] = collections.defaultdict(list)
            for record in successes:
                steps = tuple(procedure(record))
                if steps:
                    by_procedure[steps].append(record)
            when = f"{family} tasks ({env}) like: {common_words([r.task for r in group])}"
            for steps, sources in sorted(by_procedure.items(), key=lambda item: -len(item[1])):
                if len(sources) < self.min_support:
                    continue
                name = f"{family}: " + " -> ".join(parse_step(s)[0] for s in steps)
                drafts.append(
                    SkillDraft(
                        name=name,
                        when=when,
                        steps=list(steps),
                        env=env,
                        family=family,
                        avoid=avoid_lines,
                        sources=[r.source or r.task_id for r in sources],
                        support=len(sources),
                    )
                )
        return drafts


INDUCE_PROMPT = """You write reusable skills for an agent from its past attempts at {family} tasks.
Successful attempts:
{successes}
Failed attempts:
{failures}
Write what the successes did that the failures did not, as skills. Reply with JSON only:
{{"skills": [{{"name": "...", "when": "when to use it", "steps": ["tool(arg=...)", "..."], "avoid": ["..."]}}]}}
Steps may use slots like <word after "see" in the last observation> or <last number in the task>."""

SUMMARY_PROMPT = """Summarize this agent episode in at most three sentences: the task, the key steps, the outcome
and, if it failed, the cause.
{episode}"""


class PolicySummarizer:
    """Prompts a :class:`~agentgym.rollout.policy.Policy` (chat mode) for summaries and skills; bad output falls back or yields nothing."""

    def __init__(self, policy: Policy, sampling: SamplingParams | None = None, max_examples: int = 4):
        from agentgym.rollout.policy import SamplingParams

        self.policy = policy
        self.sampling = sampling or SamplingParams(max_tokens=512, temperature=0.0)
        self.max_examples = max_examples

    async def _ask(self, prompt: str) -> str:
        completion = await self.policy.chat([{"role": "user", "content": prompt}], None, self.sampling)
        return completion.text or ""

    async def summarize(self, record: EpisodeRecord) -> tuple[str, str]:
        title, text = summarize_episode(record)
        reply = (await self._ask(SUMMARY_PROMPT.format(episode=text))).strip()
        return title, reply or text

    async def induce(self, records: Sequence[EpisodeRecord]) -> list[SkillDraft]:
        groups: dict[tuple[str, str], list[EpisodeRecord]] = collections.defaultdict(list)
        for record in records:
            groups[(record.env, record.family)].append(record)
        drafts = []
        for (env, family), group in groups.items():

            def listing(items):
                return "\n\n".join(summarize_episode(r)[1] for r in items[: self.max_examples]) or "(none)"

            prompt = INDUCE_PROMPT.format(
                family=family,
                successes=listing([r for r in group if r.success]),
                failures=listing([r for r in group if not r.success]),
            )
            drafts += self._parse(await self._ask(prompt), env, family, [r.source or r.task_id for r in group])
        return drafts

    @staticmethod
    def _parse(reply: str, env: str, family: str, sources: list[str]) -> list[SkillDraft]:
        start, end = reply.find("{"), reply.rfind("}")
        try:
            skills = json.loads(reply[start : end + 1])["skills"] if start >= 0 else []
        except (json.JSONDecodeError, KeyError, TypeError):
            skills = []
        drafts = []
        for skill in skills if isinstance(skills, list) else []:
            if not isinstance(skill, dict) or not isinstance(skill.get("steps"), list) or not skill["steps"]:
                continue
            drafts.append(
                SkillDraft(
                    name=str(skill.get("name") or family),
                    when=str(skill.get("when") or family),
                    steps=[str(s) for s in skill["steps"]],
                    env=env,
                    family=family,
                    avoid=[str(a) for a in skill.get("avoid") or []],
                    sources=sources,
                )
            )
        if not drafts:
            logger.warning("the summarizer's reply held no usable skill for %s/%s: %.200r", env, family, reply)
        return drafts
