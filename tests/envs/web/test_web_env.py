"""WebEnv on real Chromium with the toy notes app: observation, every action, bad input, the closed network, tabs, crashes, branching and leaks."""

import asyncio
import contextlib
import hashlib
import os
import signal
import time

import numpy as np
import pytest

from agentgym.envs.web.app_env import WebAppEnv
from agentgym.envs.web.observation import element_id, elements
from agentgym.sandbox.browser import BrowserHost, BrowserUnavailableError, find_chromium


def act(env, action):
    observation, reward, terminated, truncated, info = env.step(action)
    return observation, reward, terminated, truncated, info


def click(env, observation, role, name):
    return act(env, f"click({element_id(observation['text'], role, name)})")


def test_observation_shows_page_tree_with_ids_and_header(notes_env):
    observation, info = notes_env.reset(options={"task_id": "add/0"})
    text = observation["text"]
    assert text.startswith("Goal: Add a note saying 'buy milk'")
    assert "URL: http://notes.local/" in text and "127.0.0.1" not in text
    assert 'Tabs: [0] "Notes" http://notes.local/ (focused)' in text
    found = {(e["role"], e["name"]) for e in elements(text)}
    assert {
        ("heading", "Notes"),
        ("textbox", "Note"),
        ("combobox", "Tag"),
        ("checkbox", "Pin"),
        ("button", "Add"),
        ("link", "External page"),
    } <= found
    assert 'options=["work", "home"]' in text
    assert observation["image"].shape == (720, 1280, 3) and observation["image"].dtype == np.uint8
    assert observation["image"].std() > 0  # a real rendering, not a blank array
    assert {tool["function"]["name"] for tool in info["tools"]} >= {"click", "fill", "goto", "answer", "mouse_click"}


def test_ids_are_stable_across_steps(notes_env):
    observation, _ = notes_env.reset(options={"task_id": "add/0"})
    before = element_id(observation["text"], "button", "Add")
    observation, *_ = act(notes_env, f'fill({element_id(observation["text"], "textbox", "Note")}, "x")')
    assert element_id(observation["text"], "button", "Add") == before
    assert 'value="x"' in observation["text"]


def test_form_actions_and_answer_judged_on_server_state(notes_env):
    observation, _ = notes_env.reset(options={"task_id": "add/0"})
    text = observation["text"]
    observation, *_ = act(notes_env, f'fill({element_id(text, "textbox", "Note")}, "buy milk")')
    observation, *_ = act(notes_env, f'select_option({element_id(text, "combobox", "Tag")}, "home")')
    assert 'value="home"' in observation["text"]
    observation, *_ = act(notes_env, f"check({element_id(text, 'checkbox', 'Pin')})")
    assert "checked=true" in observation["text"]
    observation, reward, terminated, _, info = click(notes_env, observation, "button", "Add")
    assert info["error"] is None and not terminated and reward == 0
    assert any(e["name"].startswith("buy milk") for e in elements(observation["text"]))
    observation, reward, terminated, _, info = act(notes_env, 'answer("done")')
    assert (reward, terminated, info["success"]) == (1.0, True, True)


def test_wrong_answer_fails(notes_env):
    notes_env.reset(options={"task_id": "count/0"})
    _, reward, terminated, _, info = act(notes_env, 'answer("7")')
    assert (reward, terminated, info["success"]) == (0.0, True, False)
    notes_env.reset(options={"task_id": "count/0"})
    assert act(notes_env, 'answer("1")')[1] == 1.0


@pytest.mark.parametrize(
    "action, message",
    [
        ("click(999)", "there is no element [999]"),
        ('fill(2, "x")', "click"),  # replaced below: a heading cannot be filled
        ('select_option(999, "a")', "there is no element [999]"),
        ("tab_focus(5)", "there is no tab 5"),
        ("tab_close()", "last tab"),
        ("mouse_click(5000, 10)", "outside the 1280x720 viewport"),
        ('goto("http://example.com/")', "outside the sites of this task (http://notes.local)"),
        ("go_forward()", "no next page"),
        ("click()", "missing required argument"),
        ("clack(3)", "no tool call found"),
        ("not an action at all", "no tool call found"),
    ],
)
def test_bad_actions_are_errors_not_crashes(notes_env, action, message):
    observation, _ = notes_env.reset(options={"task_id": "add/0"})
    if action.startswith("fill(2"):
        action = f'fill({element_id(observation["text"], "heading", "Notes")}, "x")'
        message = "not an <input>"
    observation, reward, terminated, truncated, info = act(notes_env, action)
    assert info["error"] and message in info["error"], info["error"]
    assert "env_error" not in info and not terminated and not truncated
    assert "Goal:" in observation["text"]  # the page is still shown after the error
    assert act(notes_env, "noop()")[4]["error"] is None


def test_blocked_requests_are_reported(notes_env):
    observation, _ = notes_env.reset(options={"task_id": "add/0"})
    observation, *_ = click(notes_env, observation, "link", "External page")
    assert "Blocked requests (outside this task's sites): http://example.com/x.png" in observation["text"]
    observation, *_ = act(notes_env, "noop()")
    assert "Blocked requests" not in observation["text"]  # reported once


def test_tabs_history_and_keyboard(notes_env):
    observation, _ = notes_env.reset(options={"task_id": "add/0"})
    observation, *_ = click(notes_env, observation, "link", "Open in new tab")
    assert '[1] "External" http://notes.local/external (focused)' in observation["text"]
    observation, *_ = act(notes_env, "tab_focus(0)")
    assert "URL: http://notes.local/\n" in observation["text"]
    observation, *_ = act(notes_env, "tab_focus(1)")
    observation, *_ = act(notes_env, "tab_close()")
    assert "[1]" not in observation["text"].split("\n")[3]
    observation, *_ = click(notes_env, observation, "link", "External page")
    observation, *_ = act(notes_env, "go_back()")
    assert "URL: http://notes.local/\n" in observation["text"]
    observation, *_ = act(notes_env, "go_forward()")
    assert "URL: http://notes.local/external" in observation["text"]
    observation, *_ = act(notes_env, 'goto("/")')
    text = observation["text"]
    act(notes_env, f"click({element_id(text, 'textbox', 'Note')})")
    observation, *_ = act(notes_env, 'keyboard_type("typed")')
    assert 'value="typed"' in observation["text"]
    assert f"Focused element: [{element_id(text, 'textbox', 'Note')}]" in observation["text"]
    observation, *_ = act(notes_env, 'press("Enter")')  # submits the form
    assert any(e["name"].startswith("typed") for e in elements(observation["text"]))


def test_pixel_actions(notes_env):
    observation, _ = notes_env.reset(options={"task_id": "add/0"})
    note = element_id(observation["text"], "textbox", "Note")
    x, y, w, h = notes_env._last_view.boxes[str(note)]
    observation, *_ = act(notes_env, f"mouse_click({int(x + w / 2)}, {int(y + h / 2)})")
    assert f"Focused element: [{note}]" in observation["text"]
    observation, *_ = act(notes_env, 'keyboard_type("by pixels")')
    assert 'value="by pixels"' in observation["text"]
    assert act(notes_env, "mouse_drag(1, 1, 50, 50)")[4]["error"] is None


def test_set_of_marks_draws_boxes(notes_app):
    plain = WebAppEnv("notes", screenshot=True)
    marked = WebAppEnv("notes", set_of_marks=True)
    try:
        a = plain.reset(options={"task_id": "add/0"})[0]["image"]
        b = marked.reset(options={"task_id": "add/0"})[0]["image"]
        assert a.shape == b.shape and (a != b).any()
        assert ((b == [255, 0, 64]).all(axis=-1)).sum() > 100  # the mark colour is there
    finally:
        plain.close()
        marked.close()


def _digest(observation):
    return observation["text"], hashlib.sha256(observation["image"].tobytes()).hexdigest()


def test_fork_restores_browser_and_server_state_exactly(notes_env):
    observation, _ = notes_env.reset(options={"task_id": "add/0"})
    observation, *_ = click(notes_env, observation, "link", "External page")
    observation, *_ = act(notes_env, "go_back()")
    observation, *_ = click(notes_env, observation, "link", "Visits")
    observation, *_ = act(notes_env, "go_back()")  # history: /, /external, /visits (forward)
    act(notes_env, f'fill({element_id(observation["text"], "textbox", "Note")}, "half typed")')
    observation, *_ = act(notes_env, f"click({element_id(observation['text'], 'textbox', 'Note')})")
    with notes_env.snapshot() as snapshot:
        fork = notes_env.fork(snapshot)
    try:
        assert fork.fork_mode == "restore" and fork.turn == notes_env.turn
        assert _digest(act(notes_env, 'keyboard_type("!")')[0]) == _digest(act(fork, 'keyboard_type("!")')[0])
        # The branches are independent, down to the server's database.
        observation, *_ = click(fork, act(fork, "noop()")[0], "button", "Add")
        assert any(e["name"].startswith("half typed!") for e in elements(observation["text"]))
        assert notes_env.app.db.query("SELECT count(*) FROM notes")[0][0] == 1
        assert fork.app.db.query("SELECT count(*) FROM notes")[0][0] == 2
    finally:
        fork.close()


def test_forks_keep_back_and_forward_history(notes_env):
    observation, _ = notes_env.reset(options={"task_id": "add/0"})
    observation, *_ = click(notes_env, observation, "link", "External page")
    observation, *_ = act(notes_env, "go_back()")
    observation, *_ = click(notes_env, observation, "link", "Open in new tab")
    observation, *_ = act(notes_env, "tab_focus(0)")
    with notes_env.snapshot() as snapshot:
        fork = notes_env.fork(snapshot)
    try:
        assert fork.fork_mode == "restore"
        for action in ("go_forward()", "go_back()", "tab_focus(1)", "tab_close()"):
            assert _digest(act(notes_env, action)[0]) == _digest(act(fork, action)[0]), action
    finally:
        fork.close()


def test_fork_after_a_form_post_is_exact_too(notes_env):
    observation, _ = notes_env.reset(options={"task_id": "add/0"})
    act(notes_env, f'fill({element_id(observation["text"], "textbox", "Note")}, "one")')
    observation, *_ = click(notes_env, observation, "button", "Add")
    observation, *_ = click(notes_env, observation, "link", "External page")
    with notes_env.snapshot() as snapshot:
        fork = notes_env.fork(snapshot)
    try:
        # POST-redirect-GET leaves two entries with the same URL. Chromium usually turns the rebuild's
        # second navigation to it into a replacement (and the fork replays), but not always: either
        # way the verified fork must behave exactly like the original.
        assert fork.fork_mode in ("restore", "replay")
        for action in ("go_back()", "go_back()", "go_forward()"):
            assert _digest(act(notes_env, action)[0]) == _digest(act(fork, action)[0]), action
        assert fork.app.db.query("SELECT text FROM notes") == notes_env.app.db.query("SELECT text FROM notes")
    finally:
        fork.close()


def test_fork_replays_when_a_reload_would_differ(notes_env):
    observation, _ = notes_env.reset(options={"task_id": "add/0"})
    observation, *_ = click(notes_env, observation, "link", "Visits")
    assert "Visits: 1" in observation["text"]
    fork = notes_env.fork()
    try:
        assert fork.fork_mode == "replay"  # reloading would have counted a second visit
        assert _digest(act(notes_env, "noop()")[0]) == _digest(act(fork, "noop()")[0])
    finally:
        fork.close()


def test_restore_rewinds_the_same_env(notes_env):
    observation, _ = notes_env.reset(options={"task_id": "add/0"})
    snapshot = notes_env.snapshot()
    act(notes_env, f'fill({element_id(observation["text"], "textbox", "Note")}, "gone")')
    click(notes_env, observation, "button", "Add")
    notes_env.restore(snapshot)
    snapshot.release()
    assert notes_env.turn == 0
    assert notes_env.app.db.query("SELECT count(*) FROM notes")[0][0] == 1
    assert "gone" not in act(notes_env, "noop()")[0]["text"]


@pytest.mark.parametrize("reported", [True, False], ids=["exit-reported", "exit-not-yet-reported"])
def test_browser_crash_is_an_env_error_and_reset_recovers(notes_env, reported):
    """Killed Chromium: the step is an env error and the next reset runs on a fresh browser, also when Playwright has
    not yet reported the exit when the reset comes (withheld here; a race seen in a CI rehearsal, where the reset
    tried to reuse the dead browser's context)."""
    host = notes_env._host
    notes_env.reset(options={"task_id": "add/0"})
    launches = host.launches
    if not reported:
        host._browser.remove_listener("disconnected", host._on_disconnected)
    pids = host.chromium_pids()
    assert pids
    for pid in pids:
        # the browser's children may already have died with it
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    observation, reward, terminated, truncated, info = act(notes_env, "noop()")
    assert truncated and "browser" in info["env_error"].lower()
    observation, _ = notes_env.reset(options={"task_id": "add/0"})
    assert host.launches == launches + 1 and "[1]" in observation["text"]
    assert act(notes_env, "noop()")[4]["error"] is None


def test_renderer_crash_is_an_env_error(notes_env):
    notes_env.reset(options={"task_id": "add/0"})
    page = notes_env.session.page

    async def crash():
        cdp = await page.context.new_cdp_session(page)
        try:
            await asyncio.wait_for(cdp.send("Page.crash"), 5)
        except Exception:
            pass  # the renderer dies before answering

    notes_env._run(crash())
    _, _, _, truncated, info = act(notes_env, "noop()")
    assert truncated and "crash" in info["env_error"].lower()
    assert "[1]" in notes_env.reset(options={"task_id": "add/0"})[0]["text"]


def test_concurrent_envs_share_one_browser(notes_app):
    async def episode(env):
        observation, _ = await env.areset(options={"task_id": "add/0"})
        observation, *_ = await env.astep(f'fill({element_id(observation["text"], "textbox", "Note")}, "{id(env)}")')
        observation, *_ = await env.astep(f"click({element_id(observation['text'], 'button', 'Add')})")
        return observation["text"]

    async def main():
        envs = [WebAppEnv("notes") for _ in range(6)]
        try:
            texts = await asyncio.gather(*(episode(env) for env in envs))
        finally:
            await asyncio.gather(*(env.aclose() for env in envs))
        return envs, texts

    envs, texts = asyncio.run(main())
    for env, text in zip(envs, texts):  # each env saw only its own note: isolated servers and contexts
        assert str(id(env)) in text and sum(str(id(other)) in text for other in envs) == 1
    assert len({env._host for env in envs}) == 1


def test_no_context_or_process_leak_over_many_episodes(notes_app):
    host = BrowserHost.shared()
    env = WebAppEnv("notes")
    env.reset(options={"task_id": "add/0"})
    host.run(host.spares_ready())  # the env's context and one spare (forks take it, and give it back)
    contexts, processes = host.run(host.context_count()), len(host.chromium_pids())
    assert contexts == 2 and host.spare_count == 1
    for _ in range(8):
        observation, _ = env.reset(options={"task_id": "add/0"})
        act(env, f"click({element_id(observation['text'], 'link', 'Open in new tab')})")
        env.fork().close()
    host.run(host.spares_ready())
    assert host.run(host.context_count()) == contexts and host.spare_count == 1
    # Renderers of closed contexts exit asynchronously (slowly on a loaded machine), and Chromium keeps a
    # spare renderer process of its own for the next navigation, which comes and goes: one over the
    # start is that, a leak would be one or more per episode (8 here).
    for _ in range(150):
        if len(host.chromium_pids()) <= processes + 1:
            break
        time.sleep(0.2)
    assert len(host.chromium_pids()) <= processes + 1, (processes, host.chromium_pids())
    env.close()


def test_missing_chromium_names_the_debian_package(tmp_path, monkeypatch):
    monkeypatch.delenv("AGENTGYM_CHROMIUM", raising=False)
    with pytest.raises(BrowserUnavailableError, match="apt-get install chromium"):
        find_chromium(tmp_path / "no-such-chromium")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BrowserUnavailableError, match="apt-get install chromium"):
        find_chromium()
