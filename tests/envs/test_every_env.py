"""Every registered env passes Gymnasium's check_env and survives arbitrary model output (hypothesis)."""

import json

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentgym
from agentgym.registration import BUILTIN_ENVS

# MiniWoB++ registers 130 envs that differ only in their task page; two stand for all here, and
# tests/envs/web/test_miniwob.py resets every task (check_env x 130 would take minutes).
MINIWOB_KEPT = {"web.miniwob.click-button-v0", "web.miniwob.enter-text-v0"}
ENV_IDS = [f"agentgym/{name}" for name in BUILTIN_ENVS if not name.startswith("web.miniwob.") or name in MINIWOB_KEPT]
NEEDS_DOCKER = {
    "agentgym/code.humaneval-v0",
    "agentgym/code.repofix-v0",
    "agentgym/code.agentbench-os-v0",
    "agentgym/gui.desktop-v0",
    "agentgym/gui.desktop-apps-v0",
}


# The desktop-apps env starts its apps (LibreOffice, GIMP, Chromium) at every reset: its two checks take one to
# two minutes on two cores, so the sweep runs them (on the whole catalogue); `make test` checks the desktop env it
# extends, and tests/envs/gui/test_real_apps.py its own behaviour.
SWEPT = {"agentgym/gui.desktop-apps-v0"}


def _params():
    for env_id in ENV_IDS:
        yield pytest.param(env_id, id=env_id, marks=pytest.mark.sweep if env_id in SWEPT else ())


@pytest.fixture(params=list(_params()))
def env(request):
    env_id = request.param
    if env_id in NEEDS_DOCKER:
        request.getfixturevalue("docker_ready")
    env = gymnasium.make(env_id)
    yield env
    env.close()


def test_registry_holds_every_builtin():
    assert set(ENV_IDS) <= set(agentgym.registered_env_ids())


def test_check_env(env):
    check_env(env, skip_render_check=False, skip_close_check=True)


def replies(tool_names):
    """Arbitrary text, plus tool calls with the env's real tool names and junk arguments."""
    junk = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=30),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
        max_leaves=6,
    )
    tool_call = st.builds(
        lambda name, args: f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>",
        st.sampled_from(tool_names + ["not_a_tool"]),
        st.dictionaries(st.sampled_from(["path", "command", "code", "x", "content"]), junk, max_size=3),
    )
    return st.one_of(
        st.text(max_size=200), tool_call, st.builds("{}({})".format, st.sampled_from(tool_names), st.text(max_size=40))
    )


def test_arbitrary_replies_never_raise(env):
    env.reset(seed=0)
    tool_names = [t["function"]["name"] for t in env.reset(seed=0)[1]["tools"] if t["function"]["name"] != "submit"]

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(replies(tool_names))
    def check(reply):
        obs, reward, terminated, truncated, info = env.step(reply)
        assert isinstance(obs["text"], str) and obs["text"]
        assert {"task_id", "turn", "success", "error", "tools"} <= info.keys()
        assert "env_error" not in info, info["env_error"]
        if terminated or truncated:
            env.reset(seed=0)

    check()
