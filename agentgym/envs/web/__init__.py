"""Web environments on Playwright and Debian's Chromium: the WebEnv base, self-hosted apps with SQLite state (shop, mail, wiki), and MiniWoB++."""

from agentgym.envs.web.app_env import WebAppEnv
from agentgym.envs.web.env import Verdict, WebEnv
from agentgym.envs.web.observation import element_id, elements

__all__ = ["WebEnv", "WebAppEnv", "Verdict", "element_id", "elements"]
