"""Tests of agentgym.envs.tool."""
