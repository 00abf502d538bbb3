"""Local models for tests and CPU demos (nothing is fetched from a hub), and the check that a path is a local model."""

from pathlib import Path

from agentgym.models.tiny import build_tiny_model, tiny_model_path
from agentgym.models.tiny_vlm import build_tiny_vlm, tiny_vlm_path

__all__ = ["build_tiny_model", "build_tiny_vlm", "local_model_dir", "tiny_model_path", "tiny_vlm_path"]


def local_model_dir(path: str) -> str:
    """``path`` when it is a local model directory (it has ``config.json``); else a ValueError saying what it is.

    Hub ids (``Qwen/Qwen2.5-0.5B``) are refused here rather than by transformers' "repo id" errors:
    nothing is downloaded at run time.
    """
    if not (Path(path) / "config.json").is_file():
        reason = "is a directory without config.json" if Path(path).is_dir() else "is not a directory"
        raise ValueError(
            f"{path!r} {reason}: give a local model directory (a saved checkpoint, e.g. one written "
            "by save_pretrained or agentgym train); nothing is downloaded"
        )
    return path
