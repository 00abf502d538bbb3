"""agentgym.memory: durable memory and skill banks for agents — a store, a bank of skills and episodes, skill induction and validation, and MemoryWrapper.

An env wrapped in :class:`MemoryWrapper` reads the bank's retrieval into its first observation
and, in ``learn`` mode, writes each finished episode back; :class:`MemoryConfig` is a trainer
config's ``memory:`` section. Names load on first use (the store needs numpy, validation scipy,
the default embedder ONNX Runtime or sentence-transformers).
"""

from typing import TYPE_CHECKING

from agentgym._lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name loads on first use
    from agentgym.memory.bank import MemoryBank, Retrieval, Skill
    from agentgym.memory.config import MemoryConfig
    from agentgym.memory.embeddings import Embedder, OnnxEmbedder, SentenceTransformerEmbedder, default_embedder
    from agentgym.memory.induction import EpisodeRecord, PolicySummarizer, RuleBasedDistiller, SkillDraft
    from agentgym.memory.remote import BankActor, RemoteBank
    from agentgym.memory.store import Entry, MemoryStore
    from agentgym.memory.validation import GainEstimate, admit_candidates, paired_gain, validate_candidate
    from agentgym.memory.wrapper import MemoryWrapper

_EXPORTS = {
    "Entry": "store",
    "MemoryStore": "store",
    "Embedder": "embeddings",
    "SentenceTransformerEmbedder": "embeddings",
    "OnnxEmbedder": "embeddings",
    "default_embedder": "embeddings",
    "MemoryBank": "bank",
    "Retrieval": "bank",
    "Skill": "bank",
    "EpisodeRecord": "induction",
    "PolicySummarizer": "induction",
    "RuleBasedDistiller": "induction",
    "SkillDraft": "induction",
    "GainEstimate": "validation",
    "admit_candidates": "validation",
    "paired_gain": "validation",
    "validate_candidate": "validation",
    "MemoryWrapper": "wrapper",
    "MemoryConfig": "config",
    "BankActor": "remote",
    "RemoteBank": "remote",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
