"""Rollout records: a Turn (token-exact), a Trajectory (a list of turns), a RolloutTree (turns with parent links).

A :class:`Turn` holds what the policy was conditioned on (``prompt_ids``), what it sampled
(``completion_ids`` with their sampling ``logprobs``) and what the env did with it. Ids are never
re-derived from text. ``prompt_mask`` marks, position by position, the prompt tokens that the
policy itself sampled *given exactly the tokens before them* (1) against tokens that came from
the environment or the chat template (0). Without context folding each turn's prompt extends the
previous turn's prompt + completion, so its mask carries the earlier completions as 1s; after a
fold, the old completions become context (0s) since they were sampled under a different prefix.

:meth:`Trajectory.sequences` cuts a trajectory into training sequences: one per maximal run of
turns whose prompts extend each other (one sequence in total unless the context was folded).
Each sequence has ``input_ids``, an env-token ``mask`` (1 = model token, gets loss), the
sampling ``logprobs`` aligned to it (0.0 under mask 0) and each turn's completion span.

Images (a vision-language policy's prompts) are recorded by content hash: each turn lists the
hashes of the images its prompt holds (``Turn.image_hashes``, in the order of their runs of image
tokens in ``prompt_ids``), and the record keeps the encoded bytes once per hash in ``images``,
which stays out of ``to_dict``: a :class:`~agentgym.rollout.store.TrajectoryStore` writes each
image once, beside the JSONL, and gives them back by hash.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, fields

__all__ = ["Turn", "Trajectory", "TreeNode", "RolloutTree", "TrainingSequence"]


@dataclass
class Turn:
    """One model reply and the env's answer to it.

    ``reward`` is the env's reward for this step. ``entropy`` is the mean per-token entropy of
    the sampling distribution over the completion when the policy reports it (else ``None``).
    ``folded`` is true when older observations were folded into stubs before this prompt.
    ``usage`` is the endpoint's count of prompt and completion tokens (chat mode, where the ids
    are not known), or ``None``. ``policy_version`` is the weights' version that sampled the reply
    and ``replica`` the endpoint that served it (a remote policy's base URL, else ``None``).
    ``image_hashes`` are the content hashes (sha256 of the encoded bytes sent) of the images in
    this turn's prompt, in prompt order (empty for text prompts, and then left out of ``to_dict``).
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    prompt_mask: list[int]
    policy_version: int = 0
    action: str = ""
    observation: str = ""
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict = field(default_factory=dict)
    entropy: float | None = None
    finish_reason: str = "stop"
    folded: bool = False
    usage: dict | None = None
    replica: str | None = None
    image_hashes: list[str] = field(default_factory=list)

    def __post_init__(self):
        if len(self.prompt_mask) != len(self.prompt_ids):
            raise ValueError(f"prompt_mask has {len(self.prompt_mask)} entries for {len(self.prompt_ids)} prompt ids")
        if len(self.logprobs) != len(self.completion_ids):
            raise ValueError(f"{len(self.logprobs)} logprobs for {len(self.completion_ids)} completion ids")

    @property
    def input_ids(self) -> list[int]:
        return self.prompt_ids + self.completion_ids

    @property
    def mask(self) -> list[int]:
        """The env-token mask over :attr:`input_ids`: 1 for tokens the policy sampled, 0 for the rest."""
        return self.prompt_mask + [1] * len(self.completion_ids)

    def extends(self, previous: Turn) -> bool:
        """Whether this prompt continues ``previous``'s prompt + completion token for token."""
        n = len(previous.prompt_ids) + len(previous.completion_ids)
        return (
            len(self.prompt_ids) >= n
            and self.prompt_ids[: len(previous.prompt_ids)] == previous.prompt_ids
            and self.prompt_ids[len(previous.prompt_ids) : n] == previous.completion_ids
        )

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    def to_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        if not self.image_hashes:
            del data["image_hashes"]  # text turns are recorded as before images existed
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Turn:
        return cls(**data)


@dataclass
class TrainingSequence:
    """One model input for training: ids, env-token mask, sampling logprobs, and the turns' completion spans.

    ``image_hashes`` are the images of ``input_ids``' runs of image tokens, in order (a VLM's; else empty)."""

    input_ids: list[int]
    mask: list[int]
    logprobs: list[float]
    turn_spans: list[tuple[int, int]]  # [start, end) of each turn's completion in input_ids
    turn_indices: list[int]  # which turns of the trajectory these spans are
    policy_versions: list[int]
    image_hashes: list[str] = field(default_factory=list)


@dataclass
class Trajectory:
    """An episode: its turns, the total reward and whether the task was solved.

    ``error`` is set when the episode could not be used as a sample (the env broke, the episode
    timed out, the context overflowed); ``metadata`` carries run details (policy, seed, timing,
    group ids for group baselines).
    """

    task_id: str
    env_id: str
    turns: list[Turn] = field(default_factory=list)
    initial_observation: str = ""
    reward: float = 0.0
    success: bool = False
    terminated: bool = False
    truncated: bool = False
    error: str | None = None
    metadata: dict = field(default_factory=dict)
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    # hash -> encoded image bytes of the turns' images; not serialised (the store keeps them apart), not compared.
    images: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)

    @property
    def num_env_steps(self) -> int:
        return len(self.turns)

    @property
    def num_generated_tokens(self) -> int:
        return sum(len(t.completion_ids) for t in self.turns)

    def image_hashes(self) -> list[str]:
        """The hashes of the images the turns' prompts hold, each once, in order of first use."""
        return _unique_hashes(self.turns)

    def sequences(self) -> list[TrainingSequence]:
        """The training sequences, one per run of turns whose prompts extend each other."""
        runs: list[list[int]] = []
        for i, turn in enumerate(self.turns):
            if runs and turn.extends(self.turns[runs[-1][-1]]):
                runs[-1].append(i)
            else:
                runs.append([i])
        sequences = []
        for run in runs:
            last = self.turns[run[-1]]
            ids, mask = last.input_ids, last.mask
            logprobs = [0.0] * len(ids)
            spans = []
            for i in run:
                turn = self.turns[i]
                start = len(turn.prompt_ids)
                logprobs[start : start + len(turn.completion_ids)] = turn.logprobs
                spans.append((start, start + len(turn.completion_ids)))
            sequences.append(
                TrainingSequence(
                    ids,
                    mask,
                    logprobs,
                    spans,
                    list(run),
                    [self.turns[i].policy_version for i in run],
                    list(last.image_hashes),
                )
            )
        return sequences

    def to_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "images"}
        data["turns"] = encode_turns(self.turns, [i - 1 for i in range(len(self.turns))])
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Trajectory:
        data = dict(data)
        data["turns"] = decode_turns(data["turns"], [i - 1 for i in range(len(data["turns"]))])
        return cls(**data)


@dataclass
class TreeNode:
    """A turn in a rollout tree. ``parent`` is ``None`` for a first turn (taken from the reset state)."""

    id: int
    parent: int | None
    turn: Turn
    children: list[int] = field(default_factory=list)
    value: float | None = None  # hierarchical value V̂, None without a usable leaf below (filled by tree_values)
    branched: bool = False  # whether a fork was taken at the state after this turn

    @property
    def is_leaf(self) -> bool:
        return not self.children


@dataclass
class RolloutTree:
    """Turn-level rollouts of one task that share prefixes: nodes with parent links and leaf rewards.

    Every root-to-leaf path is an ordinary :class:`Trajectory` (:meth:`paths`); a leaf's reward is
    the sum of the step rewards along its path.
    """

    task_id: str
    env_id: str
    nodes: list[TreeNode] = field(default_factory=list)
    initial_observation: str = ""
    leaf_success: dict[int, bool] = field(default_factory=dict)
    leaf_errors: dict[int, str] = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    # As Trajectory.images: the nodes' images by hash, kept apart from to_dict.
    images: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)

    def add(self, parent: int | None, turn: Turn) -> TreeNode:
        node = TreeNode(len(self.nodes), parent, turn)
        self.nodes.append(node)
        if parent is not None:
            self.nodes[parent].children.append(node.id)
        return node

    @property
    def roots(self) -> list[TreeNode]:
        return [n for n in self.nodes if n.parent is None]

    @property
    def leaves(self) -> list[TreeNode]:
        return [n for n in self.nodes if n.is_leaf]

    def path(self, node_id: int) -> list[TreeNode]:
        """The nodes from a root down to ``node_id``."""
        path = []
        current: int | None = node_id
        while current is not None:
            path.append(self.nodes[current])
            current = self.nodes[current].parent
        return path[::-1]

    def leaf_reward(self, leaf_id: int) -> float:
        return math.fsum(n.turn.reward for n in self.path(leaf_id))

    def paths(self) -> Iterator[Trajectory]:
        """Each root-to-leaf path as a Trajectory (``metadata['tree_id']``/``['leaf']`` point back here)."""
        for leaf in self.leaves:
            turns = [n.turn for n in self.path(leaf.id)]
            yield Trajectory(
                task_id=self.task_id,
                env_id=self.env_id,
                turns=turns,
                initial_observation=self.initial_observation,
                reward=self.leaf_reward(leaf.id),
                success=self.leaf_success.get(leaf.id, False),
                terminated=turns[-1].terminated,
                truncated=turns[-1].truncated,
                error=self.leaf_errors.get(leaf.id),
                metadata={**self.metadata, "tree_id": self.id, "leaf": leaf.id},
                id=f"{self.id}-{leaf.id}",
                images={h: self.images[h] for h in _unique_hashes(turns) if h in self.images},
            )

    @property
    def num_env_steps(self) -> int:
        return len(self.nodes)

    @property
    def num_generated_tokens(self) -> int:
        return sum(len(n.turn.completion_ids) for n in self.nodes)

    def image_hashes(self) -> list[str]:
        """The hashes of the images the nodes' prompts hold, each once, in order of first use."""
        return _unique_hashes([n.turn for n in self.nodes])

    def to_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "images"}
        turns = encode_turns([n.turn for n in self.nodes], [-1 if n.parent is None else n.parent for n in self.nodes])
        data["nodes"] = [
            {
                "id": n.id,
                "parent": n.parent,
                "children": n.children,
                "value": n.value,
                "branched": n.branched,
                "turn": t,
            }
            for n, t in zip(self.nodes, turns)
        ]
        data["leaf_success"] = {str(k): v for k, v in self.leaf_success.items()}
        data["leaf_errors"] = {str(k): v for k, v in self.leaf_errors.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict) -> RolloutTree:
        data = dict(data)
        raw = data["nodes"]
        turns = decode_turns([n["turn"] for n in raw], [-1 if n["parent"] is None else n["parent"] for n in raw])
        data["nodes"] = [
            TreeNode(n["id"], n["parent"], t, list(n["children"]), n["value"], n["branched"])
            for n, t in zip(raw, turns)
        ]
        data["leaf_success"] = {int(k): v for k, v in data["leaf_success"].items()}
        data["leaf_errors"] = {int(k): v for k, v in data["leaf_errors"].items()}
        return cls(**data)


# --- compact serialisation ----------------------------------------------------------------
# Storing every turn's full prompt is quadratic in episode length. A turn whose prompt extends
# its predecessor's (previous turn, or parent node) is stored as the number of shared ids plus
# the new ids; its mask is the predecessor's mask, 1s for the predecessor's completion, and 0s.


def encode_turns(turns: list[Turn], predecessors: list[int]) -> list[dict]:
    encoded = []
    for turn, before in zip(turns, predecessors):
        data = turn.to_dict()
        previous = turns[before] if before >= 0 else None
        if (
            previous is not None
            and turn.extends(previous)
            and turn.prompt_mask[: len(previous.input_ids)] == previous.mask
            and not any(turn.prompt_mask[len(previous.input_ids) :])
        ):
            shared = len(previous.input_ids)
            data["prompt_ids"] = {"shared": shared, "new": turn.prompt_ids[shared:]}
            del data["prompt_mask"]
            images = len(previous.image_hashes)
            if images and turn.image_hashes[:images] == previous.image_hashes:
                data["image_hashes"] = {"shared": images, "new": turn.image_hashes[images:]}
        else:
            data["prompt_mask"] = _runs_of_ones(turn.prompt_mask)
        encoded.append(data)
    return encoded


def decode_turns(encoded: list[dict], predecessors: list[int]) -> list[Turn]:
    turns: list[Turn] = []
    for data, before in zip(encoded, predecessors):
        data = dict(data)
        if isinstance(data.get("image_hashes"), dict):
            hashes = data["image_hashes"]
            data["image_hashes"] = turns[before].image_hashes[: hashes["shared"]] + hashes["new"]
        if isinstance(data["prompt_ids"], dict):
            previous = turns[before]
            new = data["prompt_ids"]["new"]
            data["prompt_ids"] = previous.input_ids[: data["prompt_ids"]["shared"]] + new
            data["prompt_mask"] = previous.mask + [0] * len(new)
        else:
            data["prompt_mask"] = _ones_from_runs(data["prompt_mask"], len(data["prompt_ids"]))
        turns.append(Turn.from_dict(data))
    return turns


def _unique_hashes(turns: list[Turn]) -> list[str]:
    return list(dict.fromkeys(h for turn in turns for h in turn.image_hashes))


def _runs_of_ones(mask: list[int]) -> list[list[int]]:
    runs, start = [], None
    for i, bit in enumerate(mask + [0]):
        if bit and start is None:
            start = i
        elif not bit and start is not None:
            runs.append([start, i])
            start = None
    return runs


def _ones_from_runs(runs: list[list[int]], length: int) -> list[int]:
    mask = [0] * length
    for start, end in runs:
        mask[start:end] = [1] * (end - start)
    return mask
