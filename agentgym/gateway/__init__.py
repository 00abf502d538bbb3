"""The gateway: train and evaluate agent programs users already have, through an OpenAI-compatible endpoint that records token-exact episodes.

A program changes only its base URL (and uses its session's key as the API key); agentgym envs are
its tools (an MCP server per session) and its graders; its episodes train the trainers
(``rollout_backend: gateway``) and run the eval harness (``evaluate(..., program=...)``). See
``docs/gateway.md``.
"""

from typing import TYPE_CHECKING

from agentgym._lazy import lazy_exports

if TYPE_CHECKING:
    from agentgym.gateway.branching import Replay, fork_episode
    from agentgym.gateway.programs import (
        GatewayJob,
        Program,
        ProgramConfig,
        ProgramContext,
        load_program,
        reset_and_run,
        run_episode,
    )
    from agentgym.gateway.server import Gateway
    from agentgym.gateway.session import Session, SessionLimits

_EXPORTS = {
    "Gateway": "server",
    "GatewayJob": "programs",
    "Program": "programs",
    "ProgramConfig": "programs",
    "ProgramContext": "programs",
    "Session": "session",
    "SessionLimits": "session",
    "Replay": "branching",
    "fork_episode": "branching",
    "load_program": "programs",
    "reset_and_run": "programs",
    "run_episode": "programs",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
