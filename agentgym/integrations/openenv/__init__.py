"""OpenEnv both ways: any agentgym env served as an OpenEnv environment (with a branching extension), and any OpenEnv server used as an agentgym env.

Names are imported lazily, so ``import agentgym.integrations.openenv`` loads no OpenEnv, FastAPI
or FastMCP until a name that needs them is used.
"""

from agentgym._lazy import lazy_exports

_EXPORTS = {
    "AgentGymAction": "protocol",
    "AgentGymEnvClient": "protocol",
    "AgentGymObservation": "protocol",
    "AgentGymState": "protocol",
    "BranchingError": "protocol",
    "AgentGymEnvironment": "server",
    "create_openenv_app": "server",
    "serve": "server",
    "write_env_dir": "server",
    "OpenEnvEnv": "client_env",
    "OpenEnvError": "client_env",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
