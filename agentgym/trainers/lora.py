"""LoRA adapters (through ``peft``) for the trainers: the config's ``peft`` section, and the merged weights a sampler loads.

A trainer given ``peft: {r, alpha, target_modules, ...}`` (or a ``peft_config``) trains only the
adapter (TRL's GRPOTrainer wraps the model with ``peft.get_peft_model``); checkpoints hold the
adapter, and a resumed run loads it back. Samplers that hold a plain copy of the model (SAO's
producer, the cluster's replicas) receive :func:`merged_weights`: each adapted weight with its
low-rank update folded in, under the plain model's names, so they run the trained policy with no
adapter code at all. In-process TreeGRPO samples from the adapted module itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch

from agentgym.extras import requires

__all__ = ["LoraSection", "adapter_config", "is_adapted", "lora_section", "merged_weights", "plain_model"]


@dataclass
class LoraSection:
    """The ``peft`` section of a trainer config: a LoRA adapter (``peft.LoraConfig``'s main fields).

    ``target_modules``: module names (or ``"all-linear"``, every linear layer but the output one)
    that get a low-rank update. TRL computes log-probabilities from the output layer's weight
    directly, so an adapter on ``lm_head`` would never train; list it in ``modules_to_save`` to
    train a full copy of it instead (which unties it from the input embeddings).
    """

    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] | str = "all-linear"
    modules_to_save: list[str] | None = None

    def __post_init__(self):
        if not isinstance(self.r, int) or self.r < 1:
            raise ValueError(f"peft.r must be a positive integer, got {self.r!r}")
        if not self.alpha > 0:
            raise ValueError(f"peft.alpha must be positive, got {self.alpha!r}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"peft.dropout must be in [0, 1), got {self.dropout!r}")
        if not self.target_modules:
            raise ValueError("peft.target_modules names no module")
        if "lm_head" in ([self.target_modules] if isinstance(self.target_modules, str) else self.target_modules):
            raise ValueError(
                "peft.target_modules cannot hold lm_head (TRL reads its weight directly, so the adapter would "
                "never train); put it in peft.modules_to_save to train a copy of it"
            )

    def to_peft(self) -> Any:
        """This section as a ``peft.LoraConfig`` for a causal LM."""
        with requires("train"):
            from peft import LoraConfig

        return LoraConfig(
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=self.target_modules,
            modules_to_save=self.modules_to_save,
            task_type="CAUSAL_LM",
        )


def lora_section(section: dict | None) -> LoraSection | None:
    """The ``peft`` config section read (None: no adapter); a bad section is a ValueError."""
    if section is None:
        return None
    from agentgym.sections import from_section

    return from_section(LoraSection, section, "peft")


def adapter_config(section: dict | None, given: Any = None) -> Any:
    """The adapter a trainer trains: ``given`` (a ``peft.PeftConfig`` passed to it) or the config's ``peft`` section, never both."""
    if section is not None and given is not None:
        raise ValueError("give the adapter once: as the config's `peft` section or as peft_config, not both")
    if given is not None:
        return given
    lora = lora_section(section)
    return lora.to_peft() if lora is not None else None


def plain_model(model: torch.nn.Module) -> torch.nn.Module:
    """The model a peft model wraps (its adapter layers still in it), else ``model`` itself."""
    return cast(Any, model).get_base_model() if is_adapted(model) else model


def is_adapted(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a peft model (an adapter wrapped around a base model)."""
    try:
        from peft import PeftModel
    except ModuleNotFoundError:
        return False
    return isinstance(model, PeftModel)


def merged_weights(model: torch.nn.Module, skip_prefix: str | None = None) -> dict[str, torch.Tensor]:
    """The weights of the plain model that ``model`` (a peft model) computes: a detached copy under the base model's names.

    An adapted layer's weight is its base weight plus the active adapters' delta (``B @ A`` times
    the scale, what ``merge_and_unload`` folds in); a module in ``modules_to_save`` contributes its
    trained copy. Nothing in ``model`` changes (merging in place and back would leave rounding
    drift in the weights being trained). Keys starting with ``skip_prefix`` are left out.
    """
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils import ModulesToSaveWrapper

    base = cast(Any, model).get_base_model()
    weights: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, tensor in base.state_dict().items():
            plain = _plain_name(name)
            if plain is not None:
                weights[plain] = tensor.detach().clone()
        for name, module in base.named_modules():
            if isinstance(module, ModulesToSaveWrapper):
                trained = module.modules_to_save[module.active_adapters[0]]  # lora_section makes one adapter
                for key, tensor in trained.state_dict().items():
                    weights[f"{name}.{key}"] = tensor.detach().clone()
            elif isinstance(module, BaseTunerLayer) and f"{name}.weight" in weights:
                for adapter in module.active_adapters:
                    if adapter in getattr(module, "lora_A", {}):
                        weights[f"{name}.weight"] += (
                            cast(Any, module).get_delta_weight(adapter).to(weights[f"{name}.weight"].dtype)
                        )
    return {k: v for k, v in weights.items() if not (skip_prefix and k.startswith(skip_prefix))}


def _plain_name(name: str) -> str | None:
    """The plain model's name for a key of a peft-wrapped model's state dict (None: adapter-only state)."""
    parts = name.split(".")
    if any(part.startswith("lora_") for part in parts) or "modules_to_save" in parts:
        return None  # adapter matrices, trained copies (added from their modules)
    return ".".join(part for part in parts if part not in ("base_layer", "original_module"))
