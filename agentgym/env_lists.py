"""The lists that built-in env ids are made from: BFCL's multi-turn categories and the self-hosted web apps.

Plain constants in a module that imports nothing, so that registration (``import agentgym``) reads
them without importing a family; the families import them from here too, so the ids and the envs
cannot disagree. Adding a web app is adding its package under ``agentgym/envs/web/apps`` and its
name here.
"""

__all__ = ["BFCL_CATEGORIES", "WEB_APPS"]

#: BFCL's multi-turn categories: ``agentgym/tool.bfcl-multi-turn-<category>-v0`` each.
BFCL_CATEGORIES = ("base", "miss_func", "miss_param", "long_context")

#: The self-hosted web apps: ``agentgym/web.<app>-v0`` each.
WEB_APPS = ("shop", "mail", "wiki")
