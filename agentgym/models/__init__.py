"""Local models for tests and CPU demos (nothing is fetched from a hub), and the check that a path is a local model."""

from pathlib import Path

from agentgym.models.tiny import build_tiny_model, tiny_model_path
from agentgym.models.tiny_vlm import build_tiny_vlm, tiny_vlm_path

__all__ = [
    "BUILT_IN_MODELS",
    "build_tiny_model",
    "build_tiny_vlm",
    "local_model_dir",
    "resolve_model",
    "tiny_model_path",
    "tiny_vlm_path",
]

#: Model names every command that takes a model accepts besides a directory: the models built locally.
BUILT_IN_MODELS = {"tiny": tiny_model_path, "tiny-vlm": tiny_vlm_path}


def resolve_model(name: str) -> str:
    """The directory of ``name``: ``tiny`` or ``tiny-vlm`` (built here on first use), or a local model directory.

    What ``model:`` in a training config, ``agentgym serve --model`` and ``agentgym eval --policy``
    all accept; anything else is a ValueError saying what it is (nothing is downloaded).
    """
    if name in BUILT_IN_MODELS:
        return str(BUILT_IN_MODELS[name]())
    try:
        return local_model_dir(name)
    except ValueError as exc:
        raise ValueError(f"{exc} (or tiny, tiny-vlm: the locally built test models)") from None


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
