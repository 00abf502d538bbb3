"""OpenEnv both ways: any agentgym env served as an OpenEnv environment (with a branching extension), and any OpenEnv server used as an agentgym env.

Names are imported lazily, so ``import agentgym.integrations.openenv`` loads no OpenEnv, FastAPI
or FastMCP until a name that needs them is used.
"""

from typing import TYPE_CHECKING

from agentgym._lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name loads on first use
    from agentgym.integrations.openenv.client_env import OpenEnvEnv, OpenEnvError
    from agentgym.integrations.openenv.protocol import (
        AgentGymAction,
        AgentGymEnvClient,
        AgentGymObservation,
        AgentGymState,
        BranchingError,
    )
    from agentgym.integrations.openenv.server import AgentGymEnvironment, create_openenv_app, serve, write_env_dir

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
