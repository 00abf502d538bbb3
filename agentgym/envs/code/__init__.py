"""Code environments in Docker sandboxes: the CodeEnv base, HumanEval (write a function), RepoFix (fix a bug in a repository) and AgentBench OS (work a Linux system as root).

Names load on first use (they need the Docker SDK: the ``code`` extra).
"""

from typing import TYPE_CHECKING

from agentgym._lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name loads on first use
    from agentgym.envs.code.agentbench_os import AgentBenchOSEnv
    from agentgym.envs.code.env import CodeEnv
    from agentgym.envs.code.humaneval import HumanEvalEnv
    from agentgym.envs.code.repofix import RepoFixEnv, load_swebench_instances

_EXPORTS = {
    "AgentBenchOSEnv": "agentbench_os",
    "CodeEnv": "env",
    "HumanEvalEnv": "humaneval",
    "RepoFixEnv": "repofix",
    "load_swebench_instances": "repofix",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
