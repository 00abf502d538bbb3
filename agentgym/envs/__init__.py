"""agentgym.envs: the built-in environment families (code; web, tool and GUI arrive in later work)."""
