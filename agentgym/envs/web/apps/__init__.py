"""The self-hosted web apps: one sub-package each, exposing ``App`` (a :class:`~agentgym.envs.web.site.WebApp`) and ``tasks()`` (its :class:`~agentgym.envs.web.tasks.WebTask` list).

:data:`agentgym.env_lists.WEB_APPS` lists them: ``agentgym/web.<app>-v0`` is registered for each, and
:class:`~agentgym.envs.web.app_env.WebAppEnv` runs any of them. Adding an app is adding its package
and its name there.
"""

__all__: list[str] = []  # the apps are its sub-packages, imported by name (agentgym.envs.web.app_env)
