"""Local models for tests and CPU demos (nothing is fetched from a hub)."""

from agentgym.models.tiny import build_tiny_model, tiny_model_path

__all__ = ["build_tiny_model", "tiny_model_path"]
