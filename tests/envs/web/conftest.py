"""Fixtures for web env tests: the toy notes app as an env, and a check that no browser context outlives the tests."""

import sys

import pytest

import agentgym.envs.web.app_env as app_env


@pytest.fixture(scope="session", autouse=True)
def no_leaked_browser_contexts():
    yield
    from agentgym.sandbox.browser import BrowserHost

    host = BrowserHost._shared
    if host is not None and not host._closed:
        assert host.live_sessions == 0, f"{host.live_sessions} browser contexts left open by the web tests"
        assert host.run(host.context_count()) == 0


@pytest.fixture
def notes_app(monkeypatch):
    """Registers tests/helpers/web_toy.py as the app "notes" (as if it were the package agentgym.envs.web.apps.notes)."""
    from tests.helpers import web_toy as toy

    monkeypatch.setattr(app_env, "WEB_APPS", (*app_env.WEB_APPS, "notes"))
    monkeypatch.setitem(sys.modules, "agentgym.envs.web.apps.notes", toy)


@pytest.fixture
def notes_env(notes_app):
    env = app_env.WebAppEnv("notes", screenshot=True)
    yield env
    env.close()
