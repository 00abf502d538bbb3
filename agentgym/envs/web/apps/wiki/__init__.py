"""The wiki web app (page history, permissions, categories, tags, user roles, audit log) and its tasks."""

from agentgym.envs.web.apps.wiki.app import WikiApp as App
from agentgym.envs.web.apps.wiki.templates import tasks

__all__ = ["App", "tasks"]
