"""Web environments on Playwright and Debian's Chromium: the WebEnv base, self-hosted apps with SQLite state (shop, mail, wiki), and MiniWoB++."""

from agentgym.extras import requires

# The web envs' third-party packages, imported first so that a missing one names the extra.
with requires("web"):
    import aiohttp  # noqa: F401
    import PIL  # noqa: F401
    import playwright  # noqa: F401

from agentgym.envs.web.app_env import WebAppEnv
from agentgym.envs.web.env import Verdict, WebEnv
from agentgym.envs.web.miniwob import MiniWoBEnv
from agentgym.envs.web.observation import element_id, elements
from agentgym.envs.web.site import WebApp

__all__ = ["MiniWoBEnv", "Verdict", "WebApp", "WebAppEnv", "WebEnv", "element_id", "elements"]
