"""Fast web forks: spare browser contexts (kept ready, refilled, never leaked) and forks that load only each tab's current page, rebuilding back/forward entries when the agent first needs them, exactly as replay would."""

import hashlib

from agentgym.envs.web.app_env import WebAppEnv
from agentgym.sandbox.browser import BrowserHost


def act(env, action):
    return env.step(action)[0]


def digest(observation):
    return observation["text"], hashlib.sha256(observation["image"].tobytes()).hexdigest()


def same_after(original, fork, actions):
    for action in actions:
        assert digest(act(original, action)) == digest(act(fork, action)), action


def shown_history(env):
    """The focused tab's back/forward list as the agent would see its URLs, and the current index."""
    session = env.session
    urls, index = env._run(session.history(session.page))
    return [session.display(url) for url in urls], index


def visit(env, *paths):
    """Reset to the notes task and open ``paths`` with goto (one history entry each)."""
    env.reset(options={"task_id": "add/0"})
    for path in paths:
        assert env.step(f'goto("http://notes.local{path}")')[4]["error"] is None


def test_spare_contexts_are_taken_by_forks_refilled_and_closed_with_the_last_session(notes_app):
    host = BrowserHost.shared()
    host.run(host.spares_ready())
    assert host.live_sessions == 0 and host.spare_count == 0  # nothing kept while no env is open
    env = WebAppEnv("notes", screenshot=True)
    try:
        visit(env, "/external")
        host.run(host.spares_ready())
        assert host.spare_count == 1 and host.run(host.context_count()) == 2
        processes = len(host.chromium_pids())
        opened = host.sessions_opened
        fork = env.fork()
        try:
            assert fork.fork_mode == "restore" and host.sessions_opened == opened + 1
            assert host.spare_count == 0 or host._filling  # the fork took the spare; another is on its way
            host.run(host.spares_ready())
            assert host.spare_count == 1 and host.run(host.context_count()) == 3
            same_after(env, fork, ["noop()"])
        finally:
            fork.close()
        host.run(host.spares_ready())
        assert host.run(host.context_count()) == 2 and len(host.chromium_pids()) <= processes + 1
    finally:
        env.close()
    host.run(host.spares_ready())
    assert host.spare_count == 0 and host.live_sessions == 0 and host.run(host.context_count()) == 0


def test_a_spare_made_while_the_last_session_closes_is_not_kept(notes_app):
    host = BrowserHost.shared()
    env = WebAppEnv("notes")
    env.reset(options={"task_id": "add/0"})  # opening the session starts making a spare
    env.close()  # at once: the spare being made must be closed, not kept
    host.run(host.spares_ready())
    assert host.spare_count == 0 and host.run(host.context_count()) == 0


def test_a_fork_loads_only_the_current_page_and_back_forward_equal_the_original(notes_app):
    env = WebAppEnv("notes", screenshot=True)
    try:
        visit(env, "/external", "/", "/external")
        act(env, "go_back()")  # history /, /external, /, /external at index 2
        fork = env.fork()
        try:
            assert fork.fork_mode == "restore"
            page = fork.session.page
            assert page in fork.session._deferred  # the other three entries are only recorded
            assert shown_history(fork) == shown_history(env)
            same_after(env, fork, ["go_forward()", "go_back()", "go_back()", "go_back()", "go_forward()"])
            assert page not in fork.session._deferred
        finally:
            fork.close()
    finally:
        env.close()


def test_after_new_navigations_in_a_fork_going_back_reaches_the_recorded_entries(notes_app):
    env = WebAppEnv("notes", screenshot=True)
    try:
        visit(env, "/external", "/")
        act(env, "go_back()")  # /, /external, / at index 1: one entry back, one forward
        fork = env.fork()
        try:
            assert fork.fork_mode == "restore"
            # A new page drops the forward entry in both; going back then passes the restored entry.
            # (Its entries are put into Chromium lazily, unless Chromium swaps the tab's renderer under
            # the history call, as seen under CI's load: the env then replays the episode, which is
            # exact, so the equality holds either way; the fallback's own test forces it.)
            actions = ['goto("http://notes.local/visits")', "go_back()", "go_back()", "go_forward()", "go_forward()"]
            same_after(env, fork, actions)
        finally:
            fork.close()
    finally:
        env.close()


def test_recorded_entries_are_not_requested_until_the_agent_goes_to_them(notes_app):
    env = WebAppEnv("notes", screenshot=True)
    try:
        visit(env, "/seen", "/external")  # the server counted one visit to /seen
        fork = env.fork()
        try:
            assert fork.fork_mode == "restore"
            assert fork.app.db.query("SELECT n FROM seen") == env.app.db.query("SELECT n FROM seen") == [(1,)]
            same_after(env, fork, ["go_back()"])  # "Seen 2 times" in both: the rebuild itself asked nothing
            assert fork.app.db.query("SELECT n FROM seen") == [(2,)]
            same_after(env, fork, ["go_back()", "go_forward()", "go_forward()"])
        finally:
            fork.close()
    finally:
        env.close()


def test_a_history_chromium_does_not_rebuild_falls_back_to_an_exact_replay(notes_app, monkeypatch):
    # Chromium rebuilds every list the fork records lazily (no URL twice in a row); a mismatch cannot
    # be provoked on purpose, so the rebuild's verdict is forced to "different" here.
    env = WebAppEnv("notes", screenshot=True)
    try:
        visit(env, "/external", "/visits")
        act(env, "go_back()")
        fork = env.fork()
        try:
            assert fork.fork_mode == "restore"

            async def differs(page):
                return False

            monkeypatch.setattr(fork.session, "rebuild_history", differs)
            same_after(env, fork, ["go_back()", "go_forward()", "go_forward()"])
            assert fork.fork_mode == "replay" and fork.turn == env.turn
        finally:
            fork.close()
    finally:
        env.close()
