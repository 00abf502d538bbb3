"""The agent loop: chat messages from observations, exact token accounting, context folding, one episode at a time.

:class:`Agent` drives one :class:`~agentgym.core.AgentEnv` with one
:class:`~agentgym.rollout.policy.Policy`. An :class:`Episode` is the live state between turns
(the env, the conversation as the policy sees it, and in token mode the exact prompt ids), so
tree rollouts can :meth:`Episode.fork` it at any turn boundary.

**Token mode** (the policy has a ``chat_format``; used for training). The first prompt is the
rendered conversation. After that, each prompt is the previous prompt + the sampled completion
ids + the env tokens the template adds for the observation (:meth:`ChatFormat.continuation_ids`):
nothing sampled is ever re-tokenised. Each :class:`~agentgym.rollout.trajectory.Turn` stores the
exact ids the policy was conditioned on and sampled.

**Context folding.** When prompt + ``max_tokens`` would exceed the context window, older
observations are replaced by short stubs (oldest first, the task statement and the newest
``keep_last`` observations stay whole, a turn is never cut in the middle) until the prompt fits
under ``target`` × window, so folds are rare rather than every turn. A folded prompt is rendered
afresh; its earlier completions become context (mask 0), and the turn is marked ``folded``. If
even the folded conversation does not fit, the episode ends truncated with an error.

**Chat mode** (any chat-completions endpoint; used for evaluation): messages in, text or native
tool calls out. Turns then carry token ids only if the endpoint returned them; folding counts
tokens with the policy's tokenizer when it has one, else estimates 4 characters per token.

**Images** (``AgentConfig.images``, an :class:`~agentgym.rollout.images.ImageConfig`; ``None``,
the default, sends text only). An observation's ``"image"`` goes into its message as an OpenAI
``image_url`` content part after the text (after native tool calls, whose tool messages must stay
text, in a user message of its own). Only the newest ``keep_last`` images stay; older ones become
text stubs (in token mode only when the context is folded, so prompts stay prefix-preserving).
When the prompt does not fit the window, images go first (beyond ``keep_last``, then the rest,
each replaced by a note) and text is folded as above. An endpoint that refuses the images as too
large gets them again at half the side, down to ``min_side``, then without them (a note says so).
Each turn records the content hashes of the images its prompt held (``Turn.image_hashes``) and the
trajectory a small thumbnail of each (``metadata["image_thumbnails"]``, for the eval report).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentgym.actions import describe_tools, tool_specs_from_openai
from agentgym.core import AgentEnv
from agentgym.rollout.chat import Message
from agentgym.rollout.images import (
    ImageConfig,
    ImageRejectedError,
    data_url_hash,
    data_url_size,
    encode_image,
    estimate_image_tokens,
    image_part,
    image_urls,
    omitted_note,
    stub_images,
    text_only,
    thumbnail,
)
from agentgym.rollout.policy import Completion, Policy, SamplingParams
from agentgym.rollout.trajectory import Trajectory, Turn
from agentgym.snapshot import Snapshot, SnapshotReleasedError

__all__ = ["Agent", "AgentConfig", "Episode", "EpisodeCheckpoint", "FoldPolicy", "DEFAULT_SYSTEM_PROMPT", "json_safe"]

DEFAULT_SYSTEM_PROMPT = (
    "You are an agent working in an environment through tools. Think briefly, then call tools; "
    "each reply is executed and you see the result. Finish with the tool that submits your work."
)
CHARS_PER_TOKEN = 4  # estimate used only in chat mode without a tokenizer


def fold_stub(text: str, turn: int) -> str:
    """The default stub that replaces a folded observation."""
    return f"[observation of turn {turn} folded to save context: {len(text)} characters]"


@dataclass(frozen=True)
class FoldPolicy:
    """How older observations are folded when the context fills up.

    Attributes:
        keep_last: the newest observations that always stay whole.
        target: fold until prompt + ``max_tokens`` is at most this fraction of the window, so
            that one fold buys many turns (each fold starts a new training sequence).
        stub: ``(observation text, turn) -> replacement text``.
    """

    keep_last: int = 2
    target: float = 0.75
    stub: Callable[[str, int], str] = fold_stub


@dataclass(frozen=True)
class AgentConfig:
    """Settings of the agent loop.

    Attributes:
        sampling: sampling parameters for every turn.
        system_prompt: the system message (``None`` for none).
        context_window: prompt + completion tokens the policy may use; ``None`` takes the
            policy's ``context_window`` attribute (or 32768).
        fold: the folding policy; ``None`` ends the episode instead when the context is full.
        max_turns: stop after this many turns (the env's own limit applies too).
        mode: ``"tokens"``, ``"chat"`` or ``"auto"`` (tokens when the policy supports them).
        native_tools: chat mode only — pass tool schemas to the endpoint and take its native
            tool calls; otherwise the tools are described in the system prompt.
        observation_role: the role of observations after the first (``"tool"`` renders as a
            tool response; ``"user"`` as a plain user turn).
        images: send observations' images to the policy, so (see the module docstring); ``None``
            sends text only.
    """

    sampling: SamplingParams = SamplingParams()
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT
    context_window: int | None = None
    fold: FoldPolicy | None = FoldPolicy()
    max_turns: int | None = None
    mode: str = "auto"
    native_tools: bool = True
    observation_role: str = "tool"
    images: ImageConfig | None = None


@dataclass
class Episode:
    """The live state of one episode between turns. ``fork()`` it to branch (tree rollouts)."""

    env: AgentEnv
    task_id: str
    tools: list[dict]
    messages: list[Message]
    observation_turns: dict[int, int]  # message index -> turn whose observation it holds (0 = task)
    raw_observations: dict[int, str]  # message index -> the observation's full text (for folding)
    prompt_ids: list[int] | None = None  # token mode: the next prompt, exactly
    prompt_mask: list[int] = field(default_factory=list)
    rendered: str | None = None  # token mode: the next prompt's text, kept to skip re-rendering
    turns: list[Turn] = field(default_factory=list)
    initial_observation: str = ""
    done: bool = False
    success: bool = False
    error: str | None = None
    folded: bool = False  # the next prompt was folded
    metadata: dict = field(default_factory=dict)
    image_turns: dict[int, int] = field(default_factory=dict)  # message index -> turn whose image it holds
    # Chat mode: message index -> the image it shows, as the env gave it (re-encoded smaller if the endpoint refuses it).
    image_sources: dict[int, np.ndarray] = field(default_factory=dict)
    image_max_side: int | None = None  # lowered when the endpoint refused images as too large
    image_thumbnails: dict[str, str] = field(default_factory=dict)  # content hash -> base64 JPEG
    images: dict[str, bytes] = field(default_factory=dict)  # content hash -> the encoded bytes sent
    prompt_images: list = field(default_factory=list)  # token mode: the prompt's images, in placeholder order

    @property
    def turn(self) -> int:
        return len(self.turns)

    async def fork(self) -> Episode:
        """An independent copy at this turn boundary: the env is forked, the conversation copied."""
        return self._copy(await self.env.afork())

    async def checkpoint(self) -> EpisodeCheckpoint:
        """Keep this turn boundary to branch from later: a retained env snapshot + a copy of the conversation.

        The episode goes on unchanged; :meth:`EpisodeCheckpoint.fork` continues from here any
        number of times, from the env's own saved state (nothing is replayed).
        """
        snapshot = await self.env.asnapshot()
        return EpisodeCheckpoint(snapshot, self._copy(self.env))

    def _copy(self, env: AgentEnv) -> Episode:
        """This episode's conversation state on ``env``; later turns of either copy leave the other alone."""
        clone = copy.copy(self)
        clone.env = env
        clone.messages = copy.deepcopy(self.messages)
        clone.observation_turns = dict(self.observation_turns)
        clone.raw_observations = dict(self.raw_observations)
        clone.prompt_ids = None if self.prompt_ids is None else list(self.prompt_ids)
        clone.prompt_mask = list(self.prompt_mask)
        clone.turns = list(self.turns)
        clone.metadata = dict(self.metadata)
        clone.image_turns = dict(self.image_turns)
        clone.image_sources = dict(self.image_sources)
        clone.image_thumbnails = dict(self.image_thumbnails)
        clone.images = dict(self.images)
        clone.prompt_images = list(self.prompt_images)
        return clone

    def trajectory(self) -> Trajectory:
        last = self.turns[-1] if self.turns else None
        metadata = dict(self.metadata)
        if self.image_thumbnails:
            metadata["image_thumbnails"] = dict(self.image_thumbnails)
        return Trajectory(
            task_id=self.task_id,
            env_id=self.env.unwrapped.kind,
            turns=list(self.turns),
            initial_observation=self.initial_observation,
            reward=math.fsum(t.reward for t in self.turns),
            success=self.success,
            terminated=bool(last and last.terminated),
            truncated=bool(last and last.truncated) or (self.done and not (last and last.terminated)),
            error=self.error,
            metadata=metadata,
            # The bytes of the images the turns were shown, each once (a store writes them beside the record).
            images={h: self.images[h] for turn in self.turns for h in turn.image_hashes if h in self.images},
        )

    async def aclose(self) -> None:
        await self.env.aclose()


class EpisodeCheckpoint:
    """An episode frozen at a turn boundary (:meth:`Episode.checkpoint`): fork it into live episodes, then release it.

    It owns one reference to the env :class:`~agentgym.snapshot.Snapshot` until :meth:`release`.
    Forking uses the source env only as a factory (its class and configuration), so it works
    after that env has taken more turns or been closed, as long as it was not reset to another task.
    """

    def __init__(self, snapshot: Snapshot, episode: Episode):
        self.snapshot = snapshot
        self._episode = episode

    @property
    def turn(self) -> int:
        return self._episode.turn

    async def fork(self) -> Episode:
        """A new live episode at this boundary, on a new env (the caller closes it: ``await episode.aclose()``)."""
        if self.snapshot is None:  # afork(None) would fork the source env's current state instead
            raise SnapshotReleasedError("this checkpoint was released; it cannot be forked")
        return self._episode._copy(await self._episode.env.afork(self.snapshot))

    def release(self) -> None:
        """Drop the snapshot reference; calling it again does nothing."""
        snapshot, self.snapshot = self.snapshot, None
        if snapshot is not None:
            snapshot.release()

    def __repr__(self) -> str:
        return f"EpisodeCheckpoint(task={self._episode.task_id!r}, turn={self.turn}, snapshot={self.snapshot!r})"


class Agent:
    """Runs episodes of an env with a policy: ``await agent.run(env, task_id)`` → Trajectory.

    For finer control (tree rollouts): ``episode = await agent.start(env, task_id)``, then
    ``completion = await agent.sample(episode)`` and ``turn = await agent.apply(episode,
    completion)`` until ``episode.done``.
    """

    def __init__(self, policy: Policy, config: AgentConfig = AgentConfig()):
        if config.mode not in ("auto", "tokens", "chat"):
            raise ValueError(f"mode must be 'auto', 'tokens' or 'chat', got {config.mode!r}")
        if config.mode == "tokens" and not policy.supports_tokens:
            raise ValueError(f"{policy.name} has no chat_format, so it cannot run in token mode")
        self.policy = policy
        self.config = config
        self.token_mode = policy.supports_tokens and config.mode != "chat"
        # Token mode with images: a chat format that expands image placeholders and hands out the images.
        self.token_images = self.token_mode and bool(getattr(policy.chat_format, "takes_images", False))
        if config.images is not None and self.token_mode and not self.token_images:
            raise ValueError(
                f"{policy.name} takes no images in token mode (a text model's chat format); "
                "run with AgentConfig(images=None) to send text only, or in chat mode"
            )
        self.context_window = config.context_window or getattr(policy, "context_window", None) or 32768

    # ------------------------------------------------------------------ the episode
    async def start(self, env: AgentEnv, task_id: str | None = None, seed: int | None = None) -> Episode:
        observation, info = await env.areset(seed=seed, options=None if task_id is None else {"task_id": task_id})
        tools = info.get("tools") or []
        messages: list[Message] = []
        system = self._system_message(tools)
        if system is not None:
            messages.append(system)
        episode = Episode(
            env=env,
            task_id=info["task_id"],
            tools=tools,
            messages=messages,
            observation_turns={len(messages): 0},
            raw_observations={len(messages): observation["text"]},
            initial_observation=observation["text"],
            metadata={"policy": self.policy.name, "seed": seed, "mode": self._mode},
        )
        messages.append({"role": "user", "content": self._content(episode, observation, 0, len(messages))})
        if (location := getattr(env.unwrapped, "location", None)) is not None:  # a remote env: where it ran
            episode.metadata["env_location"] = location
        if self.token_mode:
            self._render_prompt(episode)
        self._fit_context(episode)
        return episode

    async def sample(self, episode: Episode, sampling: SamplingParams | None = None) -> Completion:
        """Sample the next reply (does not touch the env)."""
        if episode.done:
            raise RuntimeError("the episode is over")
        sampling = sampling or self.config.sampling
        if self.token_mode:
            if episode.prompt_images:
                return await self.policy.generate(episode.prompt_ids, sampling, images=episode.prompt_images)  # type: ignore[call-arg]
            return await self.policy.generate(episode.prompt_ids, sampling)
        tools = episode.tools if self.config.native_tools else None
        while True:
            try:
                return await self.policy.chat(episode.messages, tools, sampling)
            except ImageRejectedError as exc:
                if not exc.too_large or not episode.image_sources:
                    raise
                self._shrink_images(episode, str(exc))

    async def apply(self, episode: Episode, completion: Completion) -> Turn:
        """Send a sampled reply to the env, record the turn, and extend the context for the next one."""
        action: Any = completion.text
        if completion.tool_calls:
            action = {"content": completion.text, "tool_calls": completion.tool_calls}
        image_hashes = (
            [data_url_hash(url) for url in image_urls(episode.messages)] if self.config.images is not None else []
        )
        observation, reward, terminated, truncated, info = await episode.env.astep(action)
        text = observation["text"]
        if self.config.max_turns is not None and episode.turn + 1 >= self.config.max_turns and not terminated:
            truncated = True
        turn = Turn(
            prompt_ids=list(episode.prompt_ids or []),
            completion_ids=list(completion.token_ids) if self.token_mode or completion.token_ids else [],
            logprobs=list(completion.logprobs) if self.token_mode or completion.token_ids else [],
            prompt_mask=list(episode.prompt_mask) if episode.prompt_ids is not None else [],
            policy_version=completion.policy_version,
            action=_action_text(completion),
            observation=text,
            reward=float(reward),
            terminated=bool(terminated),
            truncated=bool(truncated),
            info=json_safe({k: v for k, v in info.items() if k != "tools"}),
            entropy=completion.entropy,
            finish_reason=completion.finish_reason,
            folded=episode.folded,
            usage=completion.usage,
            replica=completion.replica,
            image_hashes=image_hashes,
        )
        episode.turns.append(turn)
        episode.success = bool(info.get("success", False))
        if info.get("env_error"):
            episode.error = f"env_error: {info['env_error']}"
        episode.folded = False
        episode.done = terminated or truncated
        if episode.done:
            return turn
        self._extend(episode, completion, observation)
        self._fit_context(episode)
        return turn

    def add_note(self, episode: Episode, text: str) -> tuple[tuple[int, int], list[int]]:
        """Add ``text`` to a token-mode episode's context as a user message before its next turn (reflect-then-retry).

        The prompt is rendered afresh with and without the note; returns where the note's ids sit in
        the new prompt, ``(start, length)``, and the ids, so that a trainer can take them out again
        (:func:`agentgym.rollout.reflect.strip_span`). A template that does not render the message
        as an insertion is a ValueError.
        """
        from agentgym.rollout.reflect import insertion_span

        if not self.token_mode or episode.done:
            raise ValueError("a note goes into a live token-mode episode")
        self._render_prompt(episode)
        before = list(episode.prompt_ids or [])
        episode.messages.append({"role": "user", "content": text})
        episode.observation_turns[len(episode.messages) - 1] = episode.turn
        episode.raw_observations[len(episode.messages) - 1] = text
        self._render_prompt(episode)
        after = list(episode.prompt_ids or [])
        span = insertion_span(before, after)
        if span is None:
            raise ValueError("the chat template does not render an added message as an insertion into the prompt")
        return span, after[span[0] : span[0] + span[1]]

    async def step(self, episode: Episode, sampling: SamplingParams | None = None) -> Turn:
        return await self.apply(episode, await self.sample(episode, sampling))

    async def run(self, env: AgentEnv, task_id: str | None = None, seed: int | None = None) -> Trajectory:
        """One whole episode from reset to done; the env is left open (the caller owns it)."""
        episode = await self.start(env, task_id, seed)
        while not episode.done:
            await self.step(episode)
        return episode.trajectory()

    async def replay(self, env: AgentEnv, trajectory: Trajectory, turns: int) -> Episode:
        """A live episode at ``trajectory``'s state after its first ``turns`` turns, reached by re-applying its replies on ``env``.

        For an env that was never forked at that turn (a success from an earlier step, say): the
        task is reset with the trajectory's seed and each recorded reply sent again, its tokens,
        logprobs and policy version kept. The env must answer every reply as it did before, else the
        state is not the one recorded and a ValueError says at which turn it diverged.
        """
        if not 0 <= turns < len(trajectory.turns):
            raise ValueError(f"a prefix of 0 to {len(trajectory.turns) - 1} turns, got {turns}")
        episode = await self.start(env, trajectory.task_id, trajectory.metadata.get("seed"))
        if episode.initial_observation != trajectory.initial_observation:
            raise ValueError("replay diverged at reset: the env's first observation differs from the recorded one")
        for index, recorded in enumerate(trajectory.turns[:turns]):
            completion = Completion(
                recorded.action,
                token_ids=list(recorded.completion_ids),
                logprobs=list(recorded.logprobs),
                finish_reason=recorded.finish_reason,
                policy_version=recorded.policy_version,
            )
            turn = await self.apply(episode, completion)
            if turn.observation != recorded.observation or episode.done:
                raise ValueError(f"replay diverged at turn {index + 1}: the env answered differently than recorded")
        return episode

    # ------------------------------------------------------------------ the conversation
    @property
    def _mode(self) -> str:
        return "tokens" if self.token_mode else "chat"

    def _template_tools(self, episode: Episode) -> list[dict] | None:
        return episode.tools or None

    def _system_message(self, tools: list[dict]) -> Message | None:
        prompt = self.config.system_prompt
        if not self.token_mode and not self.config.native_tools and tools:
            listing = describe_tools(tool_specs_from_openai(tools))
            prompt = (prompt + "\n\n" if prompt else "") + (
                f'Tools: {listing}.\nCall a tool as <tool_call>{{"name": "<tool>", "arguments": {{...}}}}</tool_call>.'
            )
        return None if prompt is None else {"role": "system", "content": prompt}

    def _render_prompt(self, episode: Episode) -> None:
        """Token mode: the prompt rendered afresh from the messages; all of it is context (mask 0)."""
        chat_format = self.policy.chat_format
        episode.rendered = chat_format.render_prompt(episode.messages, self._template_tools(episode))
        if self.token_images:  # image placeholders expanded to the processor's token count, the images beside
            episode.prompt_ids, episode.prompt_images = chat_format.prompt_inputs(  # type: ignore[attr-defined]
                episode.messages, self._template_tools(episode)
            )
        else:
            episode.prompt_ids = chat_format.encode(episode.rendered)
        episode.prompt_mask = [0] * len(episode.prompt_ids)

    def _content(self, episode: Episode, observation: dict, turn: int, index: int, text: str | None = None):
        """The content of the message at ``index`` that carries ``observation``: its text, and its image when sent.

        ``text`` replaces the observation's text (the caption of an image sent apart from it).
        """
        text = observation["text"] if text is None else text
        config = self.config.images
        image = observation.get("image") if config is not None else None
        if config is None or image is None:
            return text
        return [{"type": "text", "text": text}, self._image_content(episode, image, turn, index)]

    def _image_content(self, episode: Episode, image: np.ndarray, turn: int, index: int) -> dict:
        """The part that sends ``image`` (message ``index``, turn ``turn``), or a text note when it cannot be sent."""
        config = self.config.images
        assert config is not None
        if episode.image_max_side is not None:
            config = dataclasses.replace(config, max_side=max(config.min_side, episode.image_max_side))
        try:
            encoded = encode_image(image, config)
        except ValueError as exc:  # not an H×W×3 uint8 array: the env's bug, not a reason to end the episode
            return {"type": "text", "text": omitted_note(turn, str(exc))}
        if encoded is None:
            reason = f"over the {config.max_bytes}-byte limit even at {config.min_side} pixels"
            return {"type": "text", "text": omitted_note(turn, reason)}
        episode.image_turns[index] = turn
        episode.images[encoded.sha256] = encoded.data
        if not self.token_mode:
            episode.image_sources[index] = image
        if config.thumbnail_side and encoded.sha256 not in episode.image_thumbnails:
            # Never larger than what was sent: the report shows what the model saw.
            side = min(config.thumbnail_side, max(encoded.width, encoded.height))
            episode.image_thumbnails[encoded.sha256] = thumbnail(image, side)
        return image_part(encoded)

    def _shrink_images(self, episode: Episode, refusal: str) -> None:
        """The endpoint refused the prompt's images as too large: send them again at half the side, or not at all."""
        config = self.config.images
        assert config is not None
        side = (episode.image_max_side or config.max_side) // 2
        episode.image_max_side = side
        messages = list(episode.messages)
        for index, image in list(episode.image_sources.items()):
            turn = episode.image_turns.get(index, 0)
            content = list(messages[index]["content"])
            at = next(j for j, part in enumerate(content) if part.get("type") == "image_url")
            if side >= config.min_side:
                content[at] = self._image_content(episode, image, turn, index)
            else:
                content[at] = {
                    "type": "text",
                    "text": omitted_note(turn, f"the endpoint refused it as too large ({refusal})"),
                }
            if content[at].get("type") != "image_url":
                del episode.image_sources[index]
            messages[index] = {**messages[index], "content": content}
        episode.messages = messages

    def _keep_last_images(self, episode: Episode, keep_last: int, stub=None) -> bool:
        """Replace the images before the newest ``keep_last`` by stubs; whether any was."""
        kwargs = {} if stub is None else {"stub": stub}
        episode.messages, replaced = stub_images(episode.messages, keep_last, episode.image_turns, **kwargs)
        if replaced:
            sources = episode.image_sources.items()
            episode.image_sources = {i: image for i, image in sources if image_urls([episode.messages[i]])}
        return bool(replaced)

    def _extend(self, episode: Episode, completion: Completion, observation: dict) -> None:
        text = observation["text"]
        reply: Message = {"role": "assistant", "content": completion.text}
        new: list[Message]
        index = len(episode.messages) + 1  # where the observation's first message goes
        if completion.tool_calls and not self.token_mode:
            reply["tool_calls"] = completion.tool_calls
            # One tool message per call id, as chat APIs require; the env answered them together.
            new = [
                {
                    "role": "tool",
                    "tool_call_id": call.get("id", f"call_{i}"),
                    "content": text if i == 0 else "(see the result above)",
                }
                for i, call in enumerate(completion.tool_calls)
            ]
            if self.config.images is not None and observation.get("image") is not None:
                # Tool messages carry text only (chat APIs refuse image parts there): the screenshot follows.
                caption = f"Screenshot after turn {episode.turn}:"
                content = self._content(episode, observation, episode.turn, index + len(new), text=caption)
                new.append({"role": "user", "content": content})
        else:
            # Chat APIs accept a tool message only as the answer to a native tool call.
            role = self.config.observation_role if self.token_mode else "user"
            new = [{"role": role, "content": self._content(episode, observation, episode.turn, index)}]
        if self.token_images:
            continuation, episode.rendered, new_images = self.policy.chat_format.continuation_inputs(  # type: ignore[attr-defined]
                episode.messages, completion.token_ids, new, self._template_tools(episode), rendered=episode.rendered
            )
            episode.prompt_images = [*episode.prompt_images, *new_images]
        elif self.token_mode:
            continuation, episode.rendered = self.policy.chat_format.continuation_ids(
                episode.messages, completion.token_ids, new, self._template_tools(episode), rendered=episode.rendered
            )
        if self.token_mode:
            episode.prompt_ids = episode.prompt_ids + list(completion.token_ids) + continuation
            episode.prompt_mask = episode.prompt_mask + [1] * len(completion.token_ids) + [0] * len(continuation)
        episode.messages.append(reply)
        episode.messages.extend(new)
        episode.observation_turns[index] = episode.turn
        episode.raw_observations[index] = text
        if self.config.images is not None and not self.token_mode:
            self._keep_last_images(episode, self.config.images.keep_last)

    # ------------------------------------------------------------------ context folding
    def _prompt_length(self, episode: Episode, messages: list[Message] | None = None) -> int:
        if messages is None and episode.prompt_ids is not None:
            return len(episode.prompt_ids)
        messages = episode.messages if messages is None else messages
        chat_format = self.policy.chat_format
        images = 0
        if not self.token_mode and (urls := image_urls(messages)):
            # Chat mode: the endpoint counts image tokens itself; estimate them and count the text alone.
            images = sum(estimate_image_tokens(*data_url_size(url)) for url in urls)
            messages = text_only(messages)
        if chat_format is not None:
            return images + len(chat_format.prompt_ids(messages, self._template_tools(episode)))
        return images + sum(len(str(m.get("content") or "")) for m in messages) // CHARS_PER_TOKEN

    def _fit_context(self, episode: Episode) -> None:
        budget = self.context_window - self.config.sampling.max_tokens
        if self._prompt_length(episode) <= budget:
            return
        fold = self.config.fold
        target = int((fold.target if fold is not None else 1.0) * self.context_window) - self.config.sampling.max_tokens
        images = self.config.images
        # Images first: the costliest part of a prompt. Those beyond keep_last (token mode kept them until now).
        refit = images is not None and self._keep_last_images(episode, images.keep_last)
        if fold is not None and (not refit or self._prompt_length(episode, episode.messages) > target):
            foldable = sorted(i for i, t in episode.observation_turns.items() if t > 0)
            foldable = foldable[: max(0, len(foldable) - fold.keep_last)]
            messages = episode.messages
            changed = False
            for index in foldable:
                stub = fold.stub(episode.raw_observations[index], episode.observation_turns[index])
                if len(stub) >= len(_observation_text(messages[index]["content"])):
                    continue  # already folded, or too short to be worth a stub
                if not changed:
                    messages = copy.deepcopy(messages)
                    changed = True
                messages[index]["content"] = _with_text(messages[index]["content"], stub)
                if self._prompt_length(episode, messages) <= target:
                    break
            if changed:
                episode.messages = messages
                refit = True
        if images is not None and self._prompt_length(episode, episode.messages) > budget:

            def note(turn: int) -> str:
                return omitted_note(turn, "the prompt did not fit the model's context")

            refit = self._keep_last_images(episode, 0, note) or refit
        if refit:
            episode.folded = True
            if self.token_mode:
                self._render_prompt(episode)
            if self._prompt_length(episode) <= budget:
                return
        episode.done = True
        episode.error = (
            f"context_overflow: the prompt needs {self._prompt_length(episode)} tokens, more than "
            f"the {budget} left in a {self.context_window}-token window after max_tokens"
        )


def _observation_text(content: str | list) -> str:
    """The observation's text in a message's content: the string, or its first text part (stubs may follow it)."""
    if isinstance(content, str):
        return content
    return next((part.get("text", "") for part in content if part.get("type") == "text"), "")


def _with_text(content: str | list, text: str) -> str | list:
    """``content`` with its text replaced by ``text`` (a list keeps its image parts; its first text part gets ``text``)."""
    if isinstance(content, str):
        return text
    first = next((j for j, part in enumerate(content) if part.get("type") == "text"), None)
    if first is None:
        return [{"type": "text", "text": text}, *content]
    return [*content[:first], {"type": "text", "text": text}, *content[first + 1 :]]


def _action_text(completion: Completion) -> str:
    """The reply as text for the record: native tool calls written out as the Hermes blocks a template renders."""
    parts = [completion.text] if completion.text else []
    for call in completion.tool_calls or []:
        function = call.get("function", call)
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        parts.append(
            f'<tool_call>\n{{"name": {json.dumps(function.get("name"))}, "arguments": {arguments}}}\n</tool_call>'
        )
    return "\n".join(parts)


def json_safe(value: Any) -> Any:
    """Info values as JSON-ready data (trajectories are stored as JSONL)."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return f"<array {value.shape} {value.dtype}>"
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)
