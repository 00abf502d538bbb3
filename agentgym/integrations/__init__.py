"""Interoperability: agentgym envs served over OpenEnv and OpenEnv servers as agentgym envs (``openenv``), TRL's ``environment_factory`` (``trl``), Harbor task directories (``harbor``); each submodule imports its third-party package only when used."""

__all__: list[str] = []
