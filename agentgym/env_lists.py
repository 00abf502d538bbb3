"""The lists that built-in env ids are made from: BFCL's multi-turn categories, τ²-bench's domains and the self-hosted web apps.

Plain constants in a module that imports nothing, so that registration (``import agentgym``) reads
them without importing a family; the families import them from here too, so the ids and the envs
cannot disagree. Adding a web app is adding its package under ``agentgym/envs/web/apps`` and its
name here.
"""

__all__ = ["BFCL_CATEGORIES", "TAU2_DOMAINS", "WEB_APPS"]

#: BFCL's multi-turn categories: ``agentgym/tool.bfcl-multi-turn-<category>-v0`` each.
BFCL_CATEGORIES = ("base", "miss_func", "miss_param", "long_context")

#: The self-hosted web apps: ``agentgym/web.<app>-v0`` each.
WEB_APPS = ("shop", "mail", "wiki")

#: τ²-bench's customer-service domains: ``agentgym/conversation.tau2-<domain>-v0`` each.
TAU2_DOMAINS = ("airline", "retail", "telecom")
