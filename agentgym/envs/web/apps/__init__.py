"""The self-hosted web apps: one sub-package each, exposing ``App`` (a :class:`~agentgym.envs.web.site.WebApp`) and ``tasks()`` (its :class:`~agentgym.envs.web.tasks.WebTask` list).

:data:`APPS` is the list of apps: ``agentgym/web.<app>-v0`` is registered for each (registration
reads the literal without importing this package), and :class:`~agentgym.envs.web.app_env.WebAppEnv`
runs any of them. Adding an app is adding its package and its name here.
"""

__all__ = ["APPS"]

APPS = ("shop", "mail", "wiki")
