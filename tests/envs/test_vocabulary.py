"""One vocabulary for every env family: the author's hooks (one name and one signature per role), the backend hooks, info["grade"], tasks= and the shared option names."""

import inspect

import gymnasium
import pytest

import agentgym  # noqa: F401  (registers the built-in envs)
from agentgym.core import AgentEnv, Verdict, select_tasks
from agentgym.envs.code.env import CodeEnv
from agentgym.envs.code.humaneval import HumanEvalEnv
from agentgym.envs.code.repofix import RepoFixEnv
from agentgym.envs.gui.env import DesktopEnv
from agentgym.envs.tool.env import ToolEnv
from agentgym.envs.tool.keychain import KeyChainEnv
from agentgym.envs.tool.mcp import MCPToolEnv
from agentgym.envs.web.app_env import WebAppEnv
from agentgym.envs.web.env import WebEnv
from agentgym.envs.web.miniwob import MiniWoBEnv

FAMILIES = [CodeEnv, ToolEnv, WebEnv, DesktopEnv]
#: The hooks an author overrides, one per role, with AgentEnv's parameters in every class.
AUTHOR_HOOKS = ("_setup", "_call_tool", "_act", "_grade", "_branch_state", "_load_branch_state", "_teardown")
#: Names of hooks before the one vocabulary; no class may define them.
OLD_HOOKS = (
    "_begin",
    "_capture",
    "_load",
    "_export_payload",
    "_import_payload",
    "_snapshot_metadata",
    "_prepare",
    "_extra_state",
    "_load_extra_state",
    "_prepare_task",
    "_open",
    "_judge",
    "_capture_site",
    "_load_site",
)
BACKEND_HOOKS = tuple(name for name in vars(AgentEnv) if name.startswith("_backend_"))


def _registered_classes() -> list[type]:
    """Every AgentEnv class a registered agentgym id makes, with the classes between it and AgentEnv."""
    classes = {MCPToolEnv, *FAMILIES}
    for env_id, spec in list(gymnasium.registry.items()):  # loading an entry point may register more (minigrid does)
        if env_id.startswith("agentgym/") and isinstance(spec.entry_point, str):
            made = gymnasium.envs.registration.load_env_creator(spec.entry_point)
            if isinstance(made, type) and issubclass(made, AgentEnv):
                classes.update(cls for cls in made.__mro__ if issubclass(cls, AgentEnv) and cls is not AgentEnv)
    return sorted(classes, key=lambda cls: f"{cls.__module__}.{cls.__qualname__}")


CLASSES = _registered_classes()


def _parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_the_registered_classes_cover_every_family():
    assert set(FAMILIES) <= set(CLASSES) and len(CLASSES) >= 12


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_every_class_uses_one_name_and_one_signature_per_role(cls):
    defined = vars(cls)
    assert not [name for name in OLD_HOOKS if name in defined]
    assert not [name for name in defined if name.startswith("_backend_") and name not in BACKEND_HOOKS]
    for hook in AUTHOR_HOOKS:
        if hook in defined:
            assert _parameters(defined[hook]) == _parameters(getattr(AgentEnv, hook)), f"{cls.__name__}.{hook}"
    # The web family's _setup and _grade run on the browser loop; everywhere else they are plain methods.
    for hook in ("_setup", "_grade"):
        assert inspect.iscoroutinefunction(getattr(cls, hook)) == issubclass(cls, WebEnv), f"{cls.__name__}.{hook}"


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_backend_hooks_are_final_where_they_are_implemented(cls):
    for name in BACKEND_HOOKS:
        owner = next(base for base in cls.__mro__ if name in vars(base))
        assert owner is AgentEnv or getattr(vars(owner)[name], "__final__", False), f"{owner.__name__}.{name}"
        # Below a family base, the backend is the family's: no subclass changes it.
        assert owner is AgentEnv or owner in FAMILIES or AgentEnv in owner.__bases__, f"{owner.__name__}.{name}"


def test_the_hooks_a_family_leaves_open_are_abstract():
    assert CodeEnv.__abstractmethods__ == {"task_ids", "_setup", "_grade"}
    assert WebEnv.__abstractmethods__ == {"task_ids", "_origins", "_setup", "_grade"}
    assert ToolEnv.__abstractmethods__ == DesktopEnv.__abstractmethods__ == frozenset()
    assert AgentEnv.__abstractmethods__ == {"task_ids"}
    with pytest.raises(TypeError, match="abstract"):
        CodeEnv()


class _Sums(AgentEnv):
    """A bare AgentEnv whose state is two fields named in branch_attributes, graded by _grade through _finish."""

    branch_attributes = ("total", "added")

    def task_ids(self):
        return ["reach-5"]

    def tools(self):
        from agentgym.actions import ToolSpec

        number = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        return [ToolSpec("add", "Add n.", number), ToolSpec("answer", "Say the total.", number)]

    def _setup(self, task_id):
        self.total, self.added = 0, []
        return "Reach 5."

    def _call_tool(self, call):
        if call.name == "answer":
            return self._finish(str(call.arguments["n"]), "Answered.")
        self.total += call.arguments["n"]
        self.added.append(call.arguments["n"])
        from agentgym.core import Outcome

        return Outcome(f"Total {self.total}.")

    def _grade(self, answer):
        right = answer == str(self.total) == "5"
        return Verdict(float(right), right, details={"added": self.added}, message="Right." if right else "Wrong.")


def test_a_bare_agent_env_branches_its_branch_attributes_and_grades_through_finish():
    env = _Sums()
    env.reset()
    env.step("add(n=2)")
    child = env.fork()
    env.step("add(n=1)")  # the parent's fields are the parent's alone
    assert (child.total, child.added) == (2, [2])
    child.step("add(n=3)")
    observation, reward, terminated, _, info = child.step("answer(n=5)")
    assert (observation["text"], reward, terminated, info["success"]) == ("Answered.\n\nRight.", 1.0, True, True)
    assert info["grade"] == {"added": [2, 3]} and env.added == [2, 1]
    child.close()
    env.close()


@pytest.mark.parametrize(
    "env_class", [HumanEvalEnv, RepoFixEnv, KeyChainEnv, WebAppEnv, MiniWoBEnv, DesktopEnv, ToolEnv]
)
def test_every_built_in_env_selects_its_tasks_with_tasks(env_class):
    assert "tasks" in inspect.signature(env_class.__init__).parameters


def test_select_tasks():
    available = ["a-1", "a-2", "b-1"]
    assert select_tasks(available, None) == available
    assert select_tasks(available, "a-*") == ["a-1", "a-2"]
    assert select_tasks(available, "b-1") == ["b-1"]  # an id is a pattern that matches itself
    assert select_tasks(available, ["b-1", "a-1"]) == ["b-1", "a-1"]  # in the order given
    with pytest.raises(ValueError, match="no task matches"):
        select_tasks(available, "c-*")
    with pytest.raises(ValueError, match="unknown task id"):
        select_tasks(available, ["a-1", "c-1"])


def test_a_verdict_puts_its_details_under_info_grade():
    outcome = Verdict(1.0, True, details={"tests": 3}).outcome("Done.", error=None)
    assert (outcome.reward, outcome.success, outcome.terminated, outcome.info) == (
        1.0,
        True,
        True,
        {"grade": {"tests": 3}},
    )


# ---------------------------------------------------------------------- tasks= and options per family
def test_code_envs_select_tasks():
    assert HumanEvalEnv(tasks="HumanEval/1?").task_ids() == [f"HumanEval/{n}" for n in range(10, 20)]
    assert HumanEvalEnv(tasks=["HumanEval/3"]).task_ids() == ["HumanEval/3"]
    every = RepoFixEnv().task_ids()
    assert RepoFixEnv(tasks=every[:2]).task_ids() == every[:2]
    with pytest.raises(ValueError):
        HumanEvalEnv(tasks=["HumanEval/9999"])


def test_keychain_selects_ids_of_either_split_or_a_pattern_over_the_listed_ones():
    assert KeyChainEnv(tasks=["heldout-7", "train-3"]).task_ids() == ["heldout-7", "train-3"]
    assert KeyChainEnv(num_tasks=30, tasks="train-2?").task_ids() == [f"train-{n}" for n in range(20, 30)]
    with pytest.raises(ValueError):
        KeyChainEnv(tasks=["elsewhere-1"])


def test_web_envs_take_screen_size_and_tasks():
    env = WebAppEnv("shop", tasks="cheapest_*", screen_size=(800, 600), screenshot=True)
    try:
        assert env.screen_size == (800, 600) and env.observation_space["image"].shape == (600, 800, 3)
        assert env.task_ids() and all(task_id.startswith("cheapest_") for task_id in env.task_ids())
    finally:
        env.close()
    clicks = MiniWoBEnv("click-*")
    assert len(clicks.task_ids()) > 5 and all(task_id.startswith("click-") for task_id in clicks.task_ids())
    assert clicks.screen_size == MiniWoBEnv.default_screen_size
    clicks.close()


def test_desktop_takes_tasks_patterns_and_screenshot():
    env = DesktopEnv(tasks="sheet-*", screenshot=False)
    assert env.task_ids() and all(task_id.startswith("sheet-") for task_id in env.task_ids())
    assert "image" not in env.observation_space.spaces
    assert DesktopEnv(screen_size=(800, 600)).observation_space["image"].shape == (600, 800, 3)


# ---------------------------------------------------------------------- ToolEnv: check= is the _grade hook
def _deposit(amount: int, state: dict) -> str:
    """Put money in the account."""
    state["balance"] += amount
    return f"balance: {state['balance']}"


def _bank(**kwargs):
    return ToolEnv(
        [_deposit],
        {"save-50": {"prompt": "Deposit 50.", "goal": 50}},
        state_factory=lambda task: {"balance": 0},
        **kwargs,
    )


def test_a_tool_check_may_return_a_verdict_whose_details_are_info_grade():
    def check(task, state, transcript):
        ok = state["balance"] == task["goal"]
        return Verdict(float(ok), ok, details={"balance": state["balance"]}, message=f"Balance {state['balance']}.")

    env = _bank(check=check)
    env.reset()
    env.step("_deposit(amount=50)")
    observation, reward, terminated, _, info = env.step("submit()")
    assert (reward, terminated, info["success"], info["grade"]) == (1.0, True, True, {"balance": 50})
    assert observation["text"].endswith("Balance 50.")


def test_a_tuple_check_and_no_check_still_end_with_an_info_grade():
    env = _bank(check=lambda task, state, transcript: (0.5, False))
    env.reset()
    _, reward, terminated, _, info = env.step("submit()")
    assert (reward, terminated, info["success"], info["grade"]) == (0.5, True, False, {})
    env = _bank()
    env.reset()
    _, reward, _, _, info = env.step("submit()")
    assert (reward, info["grade"]) == (0.0, {})


class _CountingBank(ToolEnv):
    """A ToolEnv subclass that grades with the hook instead of a check and keeps a field outside the state."""

    def __init__(self, **kwargs):
        super().__init__([_deposit], {"t": "Deposit."}, state_factory=lambda task: {"balance": 0}, **kwargs)
        self.replies_seen = 0

    def _act(self, parsed):
        self.replies_seen += 1
        return super()._act(parsed)

    def _grade(self, answer):
        return Verdict(float(self.state["balance"]), True, details={"replies": self.replies_seen})

    def _branch_state(self):
        return self.replies_seen

    def _load_branch_state(self, state):
        self.replies_seen = state


def test_a_tool_subclass_overrides_grade_and_branch_state():
    env = _CountingBank()
    env.reset()
    env.step("_deposit(amount=3)")
    child = env.fork()
    assert child.replies_seen == 1
    _, reward, _, _, info = child.step("submit()")
    assert (reward, info["grade"]) == (3.0, {"replies": 2})
    child.close()
    env.close()
