"""Code environments in Docker sandboxes: the CodeEnv base, HumanEval (write a function) and RepoFix (fix a bug in a repository).

Names load on first use (they need the Docker SDK: the ``code`` extra).
"""

from agentgym._lazy import lazy_exports

_EXPORTS = {
    "CodeEnv": "env",
    "HumanEvalEnv": "humaneval",
    "RepoFixEnv": "repofix",
    "load_swebench_instances": "repofix",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
