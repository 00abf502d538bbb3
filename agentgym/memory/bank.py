"""Memory and skill banks over a MemoryStore: episodic memories, skills with utility, retrieval into prompt text, and refinement.

Two kinds of entries share one :class:`~agentgym.memory.store.MemoryStore`:

* ``kind="episode"`` — one per episode: a rule-based summary (task, key steps, outcome, failure
  cause) as text, the :class:`~agentgym.memory.induction.EpisodeRecord` in ``data["record"]``;
* ``kind="skill"`` — a :class:`Skill`: name, when to use it, the procedure, source episodes,
  usage count, success attribution, utility estimate and version, all in ``data``.

**Utility.** A validated skill starts with the validation's gain as a prior worth as many
observations as the validation had pairs (``prior_n``). Every later episode that retrieved it
adds one *advantage*: its reward minus the family's baseline — the mean reward of the family's
recorded episodes that did not retrieve this skill (or, when there are none, the validation's
"without" mean). The utility is the shrinkage mean :func:`refined_utility`
``(prior_n · gain + Σ advantages) / (prior_n + n_advantages)``. Counters are updated with the
store's atomic ``update_data``, so concurrent workers never lose an increment.

**Refinement** (:meth:`MemoryBank.refine`): near-duplicate skills (same env and family, Jaccard
similarity of their procedure step sets ≥ ``merge_threshold``) are merged into the one with the
higher utility; skills used at least ``min_uses`` times whose utility is below
``prune_below`` are deleted; then the bank is cut to its capacity, evicting the lowest-utility
skills (and the oldest episodes).
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from agentgym.memory.induction import EpisodeRecord, SkillDraft, inert, summarize_episode
from agentgym.memory.store import Entry, MemoryStore

__all__ = [
    "CorruptEntryError",
    "MEMORY_BEGIN",
    "MEMORY_END",
    "MemoryBank",
    "Retrieval",
    "Skill",
    "jaccard",
    "merge_skill_data",
    "procedures_in_prompt",
    "refined_utility",
    "split_prompt",
]

logger = logging.getLogger(__name__)

MEMORY_BEGIN = "=== Relevant experience (from memory; it may not apply) ==="
MEMORY_END = "=== End of experience ==="
EPISODE_CHARS = 400  # what of an episode summary goes into a prompt


class CorruptEntryError(ValueError):
    """An entry's ``data`` does not hold what its kind needs."""


# --------------------------------------------------------------------------- pure math
def refined_utility(prior_gain: float, prior_n: float, advantage_sum: float, advantage_n: int) -> float:
    """The shrinkage mean of the validation prior and the observed advantages (0.0 with no evidence at all)."""
    total = prior_n + advantage_n
    return (prior_n * prior_gain + advantage_sum) / total if total > 0 else 0.0


def jaccard(a: Iterable[str], b: Iterable[str]) -> float:
    """|A ∩ B| / |A ∪ B| of two collections taken as sets (1.0 for two empty ones)."""
    a, b = set(a), set(b)
    return len(a & b) / len(a | b) if a | b else 1.0


def _validation_prior(data: dict) -> tuple[float, float]:
    validation = data.get("validation") or {}
    return float(validation.get("gain", 0.0)), float(validation.get("n", 0))


def _with_utility(data: dict) -> dict:
    gain, n = _validation_prior(data)
    data["utility"] = refined_utility(gain, n, data.get("advantage_sum", 0.0), data.get("advantage_n", 0))
    return data


def _absorb(data: dict, drop: Entry) -> dict:
    return merge_skill_data(data, drop.data, drop.id)


def merge_skill_data(keep: dict, drop: dict, drop_id: int) -> dict:
    """``keep``'s data after absorbing the near-duplicate ``drop``: evidence and sources summed, version bumped.

    The kept skill's validation stays its prior (the two validations measured different
    procedures, so their pairs are not pooled); the observed uses of both count.
    """
    merged = dict(keep)
    for key in ("uses", "successes", "advantage_n"):
        merged[key] = int(keep.get(key, 0)) + int(drop.get(key, 0))
    for key in ("reward_sum", "advantage_sum"):
        merged[key] = float(keep.get(key, 0.0)) + float(drop.get(key, 0.0))
    merged["sources"] = list(dict.fromkeys([*keep.get("sources", []), *drop.get("sources", [])]))
    merged["merged"] = [*keep.get("merged", []), drop_id]
    merged["version"] = int(keep.get("version", 1)) + 1
    return _with_utility(merged)


# --------------------------------------------------------------------------- records
@dataclass
class Skill:
    """A stored skill (a view of a ``kind="skill"`` entry)."""

    id: int
    name: str
    when: str
    steps: list[str]
    env: str = ""
    family: str = ""
    avoid: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    uses: int = 0
    successes: int = 0
    utility: float = 0.0
    version: int = 1
    validation: dict | None = None

    @classmethod
    def from_entry(cls, entry: Entry) -> Skill:
        data = entry.data
        if entry.kind != "skill":
            raise CorruptEntryError(f"entry {entry.id} is a {entry.kind!r}, not a skill")
        steps = data.get("steps") if isinstance(data, dict) else None
        if not isinstance(steps, list) or not all(isinstance(s, str) for s in steps):
            raise CorruptEntryError(f"skill {entry.id} has no usable procedure in its data (data['steps'] = {steps!r})")
        try:
            return cls(
                id=entry.id,
                name=str(data.get("name") or entry.title),
                when=str(data.get("when", "")),
                steps=steps,
                env=entry.env,
                family=entry.family,
                avoid=list(data.get("avoid") or []),
                sources=list(data.get("sources") or []),
                uses=int(data.get("uses", 0)),
                successes=int(data.get("successes", 0)),
                utility=float(data.get("utility", 0.0)),
                version=int(data.get("version", 1)),
                validation=data.get("validation"),
            )
        except (TypeError, ValueError) as exc:
            raise CorruptEntryError(f"skill {entry.id} has corrupted data: {exc}") from None

    def draft(self) -> SkillDraft:
        return SkillDraft(self.name, self.when, self.steps, self.env, self.family, self.avoid, self.sources)

    def render(self) -> str:
        header = f"[skill {self.id}] {inert(self.name)} (utility {self.utility:+.2f}, used {self.uses} times)"
        return header + "\n" + self.draft().render()


@dataclass
class Retrieval:
    """What was put into a prompt: skills (stored, and extra unstored candidates) and episode entries."""

    skills: list[Skill] = field(default_factory=list)
    episodes: list[Entry] = field(default_factory=list)
    extra: list[SkillDraft] = field(default_factory=list)

    @property
    def skill_ids(self) -> list[int]:
        return [s.id for s in self.skills]

    def render(self) -> str:
        """The delimited block that goes before the task statement ("" when nothing was retrieved).

        Stored text is the episodes' (an RL policy's answers among it): every piece of it is
        :func:`~agentgym.memory.induction.inert` and on a line that starts with the block's own words, so
        only the block itself makes its markers, ``Procedure:`` and step lines.
        """
        if not (self.skills or self.episodes or self.extra):
            return ""
        lines = [MEMORY_BEGIN]
        if self.episodes:
            lines.append("Past episodes of similar tasks:")
            for entry in self.episodes:
                lines.append(f"- [episode {entry.id}] " + inert(" ".join(entry.text.split())[:EPISODE_CHARS]))
        if self.skills or self.extra:
            lines.append("Skills:")
            lines += [skill.render() for skill in self.skills]
            lines += [f"[skill candidate] {inert(draft.name)}\n{draft.render()}" for draft in self.extra]
        lines.append(MEMORY_END)
        return "\n".join(lines) + "\n\n"


_END_LINE = re.compile(f"^{re.escape(MEMORY_END)}$", re.MULTILINE)


def split_prompt(text: str) -> tuple[str, str]:
    """``(memory block, task statement)`` of a first observation written by the MemoryWrapper (the block ends
    at the first line that is exactly :data:`MEMORY_END`, which stored text cannot write)."""
    end = _END_LINE.search(text) if text.startswith(MEMORY_BEGIN + "\n") else None
    if end is None:
        return "", text
    return text[: end.end()], text[end.end() :].lstrip("\n")


_NUMBERED = re.compile(r"^\d+\.\s+(.*)$")


def procedures_in_prompt(text: str) -> list[list[str]]:
    """The procedures (step lines) of the skills in a prompt's memory block, in the order shown."""
    block, _ = split_prompt(text)
    procedures: list[list[str]] = []
    inside = False
    for line in block.splitlines():
        if line == "Procedure:":
            procedures.append([])
            inside = True
        elif inside and (match := _NUMBERED.match(line)):
            procedures[-1].append(match.group(1))
        else:
            inside = False
    return [p for p in procedures if p]


# --------------------------------------------------------------------------- the bank
class MemoryBank:
    """Episodic memories and skills in one store (a path or an open :class:`MemoryStore`)."""

    def __init__(self, store: MemoryStore | str | os.PathLike, *, read_only: bool = False, embedder=None):
        self.store = (
            store if isinstance(store, MemoryStore) else MemoryStore(store, read_only=read_only, embedder=embedder)
        )

    def close(self) -> None:
        self.store.close()

    # ------------------------------------------------------------------ writing
    def add_episode(self, record: EpisodeRecord, summary: tuple[str, str] | None = None) -> int:
        title, text = summary or summarize_episode(record)
        return self.store.add(
            Entry(
                kind="episode",
                text=text,
                title=title,
                env=record.env,
                family=record.family,
                task=record.task_id,
                tags=["success" if record.success else "failure"],
                data={"record": record.to_dict()},
            )
        )

    def add_skill(self, draft: SkillDraft, *, validation: dict | None = None) -> int:
        """Store a skill; ``validation`` (a :class:`~agentgym.memory.validation.GainEstimate` dict) sets its prior utility."""
        data = _with_utility(
            {
                "name": draft.name,
                "when": draft.when,
                "steps": list(draft.steps),
                "avoid": list(draft.avoid),
                "sources": list(draft.sources),
                "support": draft.support,
                "uses": 0,
                "successes": 0,
                "reward_sum": 0.0,
                "advantage_sum": 0.0,
                "advantage_n": 0,
                "version": 1,
                "validation": validation,
            }
        )
        return self.store.add(
            Entry(
                kind="skill",
                text=draft.render(),
                title=draft.name,
                env=draft.env,
                family=draft.family,
                tags=["validated" if validation else "unvalidated"],
                data=data,
            )
        )

    # ------------------------------------------------------------------ reading
    def skills(self, *, env: str | None = None, family: str | None = None) -> list[Skill]:
        """Every readable skill (corrupted ones are skipped with a warning)."""
        return [s for s in map(self._skill, self.store.entries(kind="skill", env=env, family=family)) if s]

    def episode_records(self, *, env: str | None = None, family: str | None = None) -> list[EpisodeRecord]:
        records = []
        for entry in self.store.entries(kind="episode", env=env, family=family):
            try:
                record = EpisodeRecord.from_dict(entry.data["record"])
            except (KeyError, TypeError, ValueError) as exc:
                logger.warning("episode %s has no usable record (%s); skipped", entry.id, exc)
                continue
            record.source = record.source or f"episode-{entry.id}"
            records.append(record)
        return records

    @staticmethod
    def _skill(entry: Entry) -> Skill | None:
        try:
            return Skill.from_entry(entry)
        except CorruptEntryError as exc:
            logger.warning("%s; skipped", exc)
            return None

    def retrieve(
        self,
        query: str,
        *,
        env: str | None = None,
        k_skills: int = 3,
        k_episodes: int = 2,
        min_utility: float | None = None,
    ) -> Retrieval:
        """The skills and episode memories most relevant to ``query`` (a task statement) in ``env``."""
        skills: list[Skill] = []
        if k_skills > 0:
            # Over-fetch: low-utility and corrupted skills are dropped after the search.
            for hit in self.store.search(query, k=4 * k_skills, kind="skill", env=env):
                skill = self._skill(hit.entry)
                if skill and (min_utility is None or skill.utility >= min_utility):
                    skills.append(skill)
        episodes = (
            [h.entry for h in self.store.search(query, k=k_episodes, kind="episode", env=env)] if k_episodes > 0 else []
        )
        return Retrieval(skills[:k_skills], episodes)

    # ------------------------------------------------------------------ utility
    def baselines(self, env: str, family: str, skill_ids: Sequence[int]) -> dict[int, float | None]:
        """Per skill: the mean reward of this family's recorded episodes that did not retrieve it (None if none)."""
        sums = {i: [0.0, 0] for i in skill_ids}
        for record in self.episode_records(env=env, family=family):
            for skill_id in skill_ids:
                if skill_id not in record.skills:
                    sums[skill_id][0] += record.reward
                    sums[skill_id][1] += 1
        return {i: (total / n if n else None) for i, (total, n) in sums.items()}

    def record_use(self, skill_ids: Sequence[int], record: EpisodeRecord) -> None:
        """Credit an episode's outcome to the skills it retrieved (usage, successes, advantage, utility)."""
        if not skill_ids:
            return
        baselines = self.baselines(record.env, record.family, skill_ids)

        def credit(skill_id: int):
            def update(data: dict) -> dict:
                data["uses"] = int(data.get("uses", 0)) + 1
                data["successes"] = int(data.get("successes", 0)) + int(record.success)
                data["reward_sum"] = float(data.get("reward_sum", 0.0)) + record.reward
                baseline = baselines[skill_id]
                if baseline is None and data.get("validation"):
                    baseline = data["validation"].get("mean_without")
                if baseline is not None:
                    data["advantage_sum"] = float(data.get("advantage_sum", 0.0)) + record.reward - baseline
                    data["advantage_n"] = int(data.get("advantage_n", 0)) + 1
                return _with_utility(data)

            return update

        for skill_id in skill_ids:
            try:
                self.store.update_data(skill_id, credit(skill_id))
            except KeyError:  # pruned or merged away by another worker since it was retrieved
                logger.info("skill %s is gone; its use is not recorded", skill_id)

    # ------------------------------------------------------------------ refinement
    def merge_duplicates(self, threshold: float = 0.8) -> list[tuple[int, int]]:
        """Merge skills of the same env and family whose procedures overlap ≥ ``threshold``; returns ``(kept, removed)`` pairs."""
        merged = []
        skills = sorted(self.skills(), key=lambda s: (-s.utility, -s.uses, s.id))
        alive = {s.id for s in skills}
        for i, keep in enumerate(skills):
            if keep.id not in alive:
                continue
            for other in skills[i + 1 :]:
                if other.id not in alive or (other.env, other.family) != (keep.env, keep.family):
                    continue
                if jaccard(keep.steps, other.steps) < threshold:
                    continue
                with self.store.transaction():
                    drop = self.store.get(other.id)
                    if drop is None:
                        continue
                    self.store.update_data(keep.id, functools.partial(_absorb, drop=drop))
                    self.store.delete(other.id)
                alive.discard(other.id)
                merged.append((keep.id, other.id))
        return merged

    def prune(self, *, min_uses: int = 5, below: float = 0.0) -> list[int]:
        """Delete skills used at least ``min_uses`` times whose utility is below ``below``; returns their ids."""
        doomed = [s.id for s in self.skills() if s.uses >= min_uses and s.utility < below]
        for skill_id in doomed:
            self.store.delete(skill_id)
        return doomed

    def enforce_capacity(self, *, max_skills: int | None = None, max_episodes: int | None = None) -> list[int]:
        """Evict the lowest-utility skills (ties: fewer uses, then older) and the oldest episodes beyond the bounds."""
        evicted = []
        if max_skills is not None:
            ranked = sorted(self.skills(), key=lambda s: (-s.utility, -s.uses, s.id))
            evicted += [s.id for s in ranked[max_skills:]]
        if max_episodes is not None:
            excess = self.store.count(kind="episode") - max_episodes
            if excess > 0:
                oldest = sorted(self.store.entries(kind="episode"), key=lambda e: (e.created, e.id))[:excess]
                evicted += [e.id for e in oldest]
        for entry_id in evicted:
            self.store.delete(entry_id)
        return evicted

    def refine(
        self,
        *,
        merge_threshold: float = 0.8,
        min_uses: int = 5,
        prune_below: float = 0.0,
        max_skills: int | None = None,
        max_episodes: int | None = None,
    ) -> dict[str, list]:
        """Merge near-duplicates, prune low-utility skills, enforce capacity; returns what each step did."""
        return {
            "merged": self.merge_duplicates(merge_threshold),
            "pruned": self.prune(min_uses=min_uses, below=prune_below),
            "evicted": self.enforce_capacity(max_skills=max_skills, max_episodes=max_episodes),
        }
