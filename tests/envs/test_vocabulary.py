"""One vocabulary for every env family: the family hooks, info["grade"], tasks= and the shared option names."""

import inspect

import pytest

from agentgym.core import Verdict, select_tasks
from agentgym.envs.code.env import CodeEnv
from agentgym.envs.code.humaneval import HumanEvalEnv
from agentgym.envs.code.repofix import RepoFixEnv
from agentgym.envs.gui.env import DesktopEnv
from agentgym.envs.tool.env import ToolEnv
from agentgym.envs.tool.keychain import KeyChainEnv
from agentgym.envs.web.app_env import WebAppEnv
from agentgym.envs.web.env import WebEnv
from agentgym.envs.web.miniwob import MiniWoBEnv

FAMILIES = [CodeEnv, ToolEnv, WebEnv, DesktopEnv]
HOOKS = ("_setup", "_grade", "_branch_state", "_load_branch_state", "_teardown")
OLD_HOOKS = ("_prepare", "_extra_state", "_load_extra_state", "_prepare_task", "_open", "_judge", "_capture_site")


@pytest.mark.parametrize("family", FAMILIES, ids=lambda cls: cls.__name__)
def test_every_family_has_the_shared_hooks_and_none_of_the_old_ones(family):
    assert all(callable(getattr(family, hook, None)) for hook in HOOKS)
    assert not [hook for hook in OLD_HOOKS if hasattr(family, hook)]


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

    def _grade(self):
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
