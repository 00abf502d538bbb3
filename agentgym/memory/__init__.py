"""agentgym.memory: durable memory and skill banks for agents — a store, a bank of skills and episodes, skill induction and validation, and MemoryWrapper.

An env wrapped in :class:`MemoryWrapper` reads the bank's retrieval into its first observation
and, in ``learn`` mode, writes each finished episode back; :class:`MemoryConfig` is a trainer
config's ``memory:`` section. Names load on first use (the store needs numpy, validation scipy,
the default embedder ONNX Runtime or sentence-transformers).
"""

from agentgym._lazy import lazy_exports

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
