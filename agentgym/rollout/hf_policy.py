"""A local transformers causal LM as a token-mode Policy: concurrent requests batched into KV-cached decoding, with exact logprobs.

The rollout runner drives many episodes at once, each awaiting :meth:`HFPolicy.generate`.
Calling ``model.generate`` per request would run them one by one and block the event loop, so
:class:`HFPolicy` queues requests for one background thread, which gathers whatever is pending
into a left-padded batch and runs its own decode loop. Requests that arrive while it decodes join
the batch at the next step (their prompts prefilled, their cache left-padded to the batch's), so a
trainer's group whose requests trickle in (each episode resets its env first) decodes as one batch,
not as a batch and a straggler batch after it. Each row keeps its own sampling parameters, seed and
stopping rule, and is answered as soon as it finishes.

The returned logprobs are those of the distribution each token was drawn from, computed in the
same pass, so trainers can use them as the behaviour policy's logprobs without a second forward.

A checkpoint with a vision tower (Qwen2-VL family: a ``vision_config`` and an image processor
saved beside it) is loaded as a vision-language model: prompts may carry images
(:meth:`HFPolicy.generate`'s ``images``), rendered through a
:class:`~agentgym.rollout.vision.VisionChatFormat` whose prompt ids already hold each image's
run of image tokens; the images are patched by the image processor and their positions get
multimodal RoPE, exactly as a trainer's forward pass over the same ids and images does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import queue
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentgym.extras import requires

with requires("train"):
    import torch
    from transformers import (
        AutoConfig,
        AutoImageProcessor,
        AutoModelForCausalLM,
        AutoModelForImageTextToText,
        AutoTokenizer,
        DynamicCache,
        DynamicLayer,
    )

from agentgym.rollout.chat import ChatFormat
from agentgym.rollout.policy import Completion, Policy, PolicyError, SamplingParams
from agentgym.rollout.vision import VisionChatFormat, image_bytes

__all__ = ["GenerationStats", "HFPolicy"]

_CLOSE = object()  # queue sentinel: the worker finishes the batch in hand and exits


@dataclass
class GenerationStats:
    """Counters kept by the worker: requests served, batches run, the largest batch, tokens sampled, and
    the requests that joined a batch already decoding."""

    requests: int = 0
    batches: int = 0
    max_batch_seen: int = 0
    generated_tokens: int = 0
    joined: int = 0


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: SamplingParams
    future: concurrent.futures.Future
    images: list[bytes] = field(default_factory=list)  # encoded, one per run of image tokens in prompt_ids


@dataclass
class _Row:
    """A request's decoding state inside a batch."""

    request: _Request
    generator: torch.Generator | None  # None for greedy rows, which draw no randomness
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    top: list[list[tuple[int, float]]] = field(default_factory=list)
    rope_delta: int = 0  # M-RoPE: a VLM row's text positions after its prompt are offset by this


class HFPolicy(Policy):
    """A transformers causal LM served in token mode, with requests batched across concurrent callers.

    Args:
        model_path: a local directory holding the model and its tokenizer (nothing is downloaded).
        device: where to run; CUDA when available, else CPU.
        dtype: the weights' dtype; by default the one the checkpoint was saved in.
        max_batch_size: the most requests decoded together (joiners fill the rows that finished).
        batch_wait_ms: how long the worker waits after the first pending request for others to
            join its batch before it starts decoding (later ones join at a decode step).
        version: the initial weights version.
        name: a label for logs; defaults to the model directory's name.
        seed: where the generators of requests without ``SamplingParams.seed`` get their seeds: a
            ``random.Random(seed)`` drawn once per request, in the order the worker takes them (a
            trainer passes its ``seed``, so a run's samples repeat); ``None``: from OS entropy.

    Sampling (per request, within one batch): ``temperature=0`` is greedy; otherwise logits are
    divided by the temperature, then top-k and then top-p (over the renormalised top-k mass) are
    applied, and the token is drawn with a per-request :class:`torch.Generator`, seeded from
    ``SamplingParams.seed`` when given, so a seeded request is reproducible whatever else shares
    its batch. A row stops on one of ``chat_format.stop_token_ids`` (kept as the last token), on
    a stop string appearing in its decoded text (the text keeps it), at ``max_tokens`` or at the
    model's ``max_position_embeddings`` (both ``"length"``).

    ``Completion.logprobs`` are the log-probabilities of the sampled tokens under
    ``log_softmax(logits / temperature)`` (raw logits for greedy decoding), **before** top-k/top-p
    truncation: the same quantity TRL computes for the policy (``logits / temperature``), so the
    ratio against training-time logprobs is 1 for unchanged weights. ``Completion.entropy`` is the
    mean per-token entropy of that same distribution.

    A vision-language checkpoint (see the module docstring) sets :attr:`accepts_images`; its
    completions never sample the image or video placeholder tokens (they stand for pixels, and a
    sampled one would break the next prompt's image count). Like top-k, that truncation leaves the
    reported logprobs those of the full distribution.

    Use it as an async context manager or call :meth:`aclose` to stop the worker thread.
    """

    accepts_images: bool = False

    def __init__(
        self,
        model_path: str | Path,
        *,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
        max_batch_size: int = 16,
        batch_wait_ms: float = 5.0,
        version: int = 0,
        name: str | None = None,
        seed: int | None = None,
    ):
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
        image_processor = None
        if getattr(AutoConfig.from_pretrained(model_path, local_files_only=True), "vision_config", None) is not None:
            image_processor = AutoImageProcessor.from_pretrained(model_path, local_files_only=True)
            model = AutoModelForImageTextToText.from_pretrained(
                model_path, local_files_only=True, dtype=dtype or "auto"
            )
        else:
            model = AutoModelForCausalLM.from_pretrained(model_path, local_files_only=True, dtype=dtype or "auto")
        self._setup(
            model.to(device),
            tokenizer,
            image_processor=image_processor,
            max_batch_size=max_batch_size,
            batch_wait_ms=batch_wait_ms,
            version=version,
            name=name or Path(model_path).name,
            seed=seed,
        )

    @classmethod
    def from_model(
        cls,
        model,
        tokenizer,
        *,
        image_processor=None,
        max_batch_size: int = 16,
        batch_wait_ms: float = 5.0,
        version: int = 0,
        name: str | None = None,
        seed: int | None = None,
    ) -> HFPolicy:
        """Wrap an in-memory model (a trainer sharing its model with the policy); it stays on its device.

        Pass the ``image_processor`` of a vision-language model to take images."""
        policy = cls.__new__(cls)
        policy._setup(
            model,
            tokenizer,
            image_processor=image_processor,
            max_batch_size=max_batch_size,
            batch_wait_ms=batch_wait_ms,
            version=version,
            name=name,
            seed=seed,
        )
        return policy

    def _setup(
        self,
        model,
        tokenizer,
        *,
        image_processor,
        max_batch_size: int,
        batch_wait_ms: float,
        version: int,
        name: str | None,
        seed: int | None = None,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        # Both raise TemplateError for templates that rewrite history.
        self.chat_format: ChatFormat | VisionChatFormat
        self._vision: VisionChatFormat | None = None
        if image_processor is not None:
            if not callable(getattr(getattr(model, "model", None), "get_rope_index", None)):
                raise ValueError(f"{type(model).__name__} is not a Qwen2-VL-style model (no M-RoPE get_rope_index)")
            self.chat_format = self._vision = VisionChatFormat(tokenizer, image_processor)
            self.accepts_images = True
        else:
            self.chat_format = ChatFormat(tokenizer)
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.version = version
        self.name = name or Path(getattr(model.config, "name_or_path", "") or "hf").name
        self.max_batch_size = max_batch_size
        self.batch_wait_ms = batch_wait_ms
        self.stats = GenerationStats()
        text_config = model.config.get_text_config()
        self._max_positions: int | None = getattr(text_config, "max_position_embeddings", None)
        self.context_window = self._max_positions
        self._vocab_size = model.get_input_embeddings().num_embeddings
        # Padding ids are masked out; any valid id will do when the tokenizer has no pad token.
        self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self._banned_ids: torch.Tensor | None = None  # never sampled: a VLM's image and video placeholders
        if self._vision is not None:
            self._banned_ids = torch.tensor(
                [self._vision.image_token_id, self._vision.video_token_id], device=self.device
            )
        self._queue: queue.Queue = queue.Queue()
        self._weights_lock = threading.Lock()  # held by the worker for a whole batch
        self._state_lock = threading.Lock()  # orders enqueues against close
        self._worker: threading.Thread | None = None
        self._closed = False
        self._close_seen = False  # the worker took the close sentinel while a batch was decoding
        self._updates_waiting = 0  # update_weights calls waiting for the batch: it takes no joiners then
        self._seeds = None if seed is None else random.Random(seed)  # drawn only by the worker thread

    # --- public API ------------------------------------------------------------------------

    async def generate(
        self, prompt_ids: Sequence[int], sampling: SamplingParams, images: Sequence | None = None
    ) -> Completion:
        """Sample a completion for ``prompt_ids``; it is batched with whatever else is pending.

        ``images`` (a vision-language model only) are the prompt's images, one per run of image
        tokens in ``prompt_ids``, in order: ``data:image/...`` URLs, encoded bytes, PIL images or
        H×W×3 uint8 arrays (see :func:`~agentgym.rollout.vision.image_bytes`); each run must be as
        long as the image processor makes that image (as :attr:`chat_format` renders it).
        """
        request = _Request(
            self._check_request(prompt_ids, sampling),
            sampling,
            concurrent.futures.Future(),
            self._check_images(prompt_ids, images),
        )
        with self._state_lock:
            if self._closed:
                raise PolicyError(f"policy {self.name!r} is closed")
            if self._worker is None:
                # Started on first use so that a policy that never generates holds no thread.
                self._worker = threading.Thread(target=self._serve, name=f"HFPolicy-{self.name}", daemon=True)
                self._worker.start()
            self._queue.put(request)
        return await asyncio.wrap_future(request.future)

    def update_weights(self, weights: torch.nn.Module | dict[str, torch.Tensor], version: int | None = None) -> None:
        """Load new weights (a state dict or a model of the same architecture) and bump :attr:`version`.

        Waits for the batch in progress to finish, so every completion is sampled from one set of
        weights. Passing the policy's own model (a trainer that updated it in place) only bumps
        the version. The batch in progress takes no more joiners meanwhile, so a steady stream of
        requests cannot hold the update off.
        """
        with self._state_lock:
            self._updates_waiting += 1
        try:
            with self._weights_lock:
                if weights is not self.model:
                    state_dict = weights.state_dict() if isinstance(weights, torch.nn.Module) else weights
                    self._load_state_dict(state_dict)
                self.version = self.version + 1 if version is None else version
        finally:
            with self._state_lock:
                self._updates_waiting -= 1

    async def aclose(self) -> None:
        """Stop the worker thread once the batch in progress is done; later calls to :meth:`generate` fail."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
            worker = self._worker
            if worker is not None:
                self._queue.put(_CLOSE)
        if worker is not None:
            await asyncio.to_thread(worker.join)

    def describe(self) -> dict:
        return {
            **super().describe(),
            "device": str(self.device),
            "max_batch_size": self.max_batch_size,
            "accepts_images": self.accepts_images,
        }

    # --- request checks --------------------------------------------------------------------

    def _check_request(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> list[int]:
        ids = [int(i) for i in prompt_ids]
        if not ids:
            raise PolicyError("empty prompt: token-mode generation needs at least one prompt token")
        if self._max_positions is not None and len(ids) >= self._max_positions:
            raise PolicyError(
                f"prompt of {len(ids)} tokens does not fit the model's context of "
                f"{self._max_positions} positions (at least one must be left for the completion)"
            )
        # Checked here because an out-of-range id inside the batch would fail the other rows too
        # (and on CUDA poison the context with a device-side assert).
        bad = [i for i in ids if not 0 <= i < self._vocab_size]
        if bad:
            raise PolicyError(f"prompt holds token ids outside the vocabulary of {self._vocab_size}: {bad[:5]}")
        if sampling.max_tokens < 1:
            raise PolicyError(f"max_tokens must be at least 1, got {sampling.max_tokens}")
        if sampling.temperature < 0:
            raise PolicyError(f"temperature must be >= 0, got {sampling.temperature}")
        if not 0 < sampling.top_p <= 1:
            raise PolicyError(f"top_p must be in (0, 1], got {sampling.top_p}")
        if sampling.top_k < 0:
            raise PolicyError(f"top_k must be >= 0, got {sampling.top_k}")
        if sampling.top_logprobs < 0:
            raise PolicyError(f"top_logprobs must be >= 0, got {sampling.top_logprobs}")
        if sampling.seed is not None and not -(2**63) <= sampling.seed < 2**64:
            raise PolicyError(f"seed must fit in 64 bits, got {sampling.seed}")
        if any(not s for s in sampling.stop):
            raise PolicyError("stop strings must be non-empty")
        return ids

    def _check_images(self, prompt_ids: Sequence[int], images: Sequence | None) -> list[bytes]:
        """The images as encoded bytes, checked against the prompt's runs of image tokens."""
        vision = self._vision
        if vision is None:
            if images:
                raise PolicyError(f"model {self.name!r} takes no images: it is a text-only model")
            return []
        try:
            encoded = [image_bytes(image) for image in images or ()]
            vision.check_images(prompt_ids, encoded)
        except ValueError as exc:
            raise PolicyError(f"bad images: {exc}") from None
        return encoded

    def _load_state_dict(self, state_dict: dict[str, torch.Tensor]) -> None:
        params = self.model.state_dict()
        unexpected = sorted(set(state_dict) - set(params))
        # Tied weights (lm_head and the embeddings) are often saved once; the alias loads them.
        given = {params[k].data_ptr() for k in state_dict if k in params}
        missing = sorted(k for k in set(params) - set(state_dict) if params[k].data_ptr() not in given)
        if missing or unexpected:
            raise ValueError(f"state dict does not match the model: missing {missing[:5]}, unexpected {unexpected[:5]}")
        # Checked before loading: load_state_dict copies the tensors that fit before it raises for the rest.
        reshaped = sorted(k for k, v in state_dict.items() if tuple(v.shape) != tuple(params[k].shape))
        if reshaped:
            name = reshaped[0]
            raise ValueError(
                f"state dict does not match the model: {len(reshaped)} tensors of other shapes, e.g. {name} "
                f"{tuple(state_dict[name].shape)} for {tuple(params[name].shape)}"
            )
        self.model.load_state_dict(state_dict, strict=False)

    # --- worker thread ---------------------------------------------------------------------

    def _serve(self) -> None:
        closing = False
        while not closing:
            batch, closing = self._collect()
            # Requests whose caller was cancelled while queued are dropped here.
            batch = [r for r in batch if r.future.set_running_or_notify_cancel()]
            if not batch:
                continue
            try:
                # no_grad rather than inference_mode: buffers a model updates in its forward (dynamic
                # RoPE's inv_freq) would become inference tensors and break a trainer sharing the model.
                with self._weights_lock, torch.no_grad():
                    self._run_batch(batch)
            except Exception as exc:  # noqa: BLE001 - any failure must reach the callers, not kill the worker
                for request in batch:
                    if not request.future.done():
                        error = PolicyError(f"generation failed: {type(exc).__name__}: {exc}")
                        error.__cause__ = exc
                        request.future.set_exception(error)
            closing = closing or self._close_seen  # taken from the queue by a batch's joiners

    def _collect(self) -> tuple[list[_Request], bool]:
        """The next batch: the first pending request, plus those arriving within ``batch_wait_ms``."""
        first = self._queue.get()
        if first is _CLOSE:
            return [], True
        batch = [first]
        deadline = time.monotonic() + self.batch_wait_ms / 1000
        while len(batch) < self.max_batch_size:
            remaining = deadline - time.monotonic()
            try:
                item = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _CLOSE:
                return batch, True
            batch.append(item)
        return batch, False

    def _run_batch(self, requests: list[_Request]) -> None:
        """Decode ``requests`` together; requests queued meanwhile join at the next step (``requests`` grows by them)."""
        version = self.version
        self.stats.batches += 1
        rows, cache, attention_mask, tokens = self._start_rows(requests, version)
        while rows:  # once every row is done, the next batch is gathered afresh (with its wait for joiners)
            joiners = self._joiners(len(rows)) if self._can_join(cache) else []
            if joiners:
                requests.extend(joiners)
                self.stats.joined += len(joiners)
                new = self._start_rows(joiners, version)
                rows, cache, attention_mask, tokens = _merge((rows, cache, attention_mask, tokens), new)
            self.stats.max_batch_seen = max(self.stats.max_batch_seen, len(rows))
            position_ids = torch.tensor(
                [[len(r.request.prompt_ids) + len(r.token_ids) - 1 + r.rope_delta] for r in rows], device=self.device
            )
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(rows), 1))], dim=1)
            logits = self._forward(tokens[:, None], attention_mask, position_ids, cache, {})
            rows, cache, attention_mask, tokens = self._advance(rows, cache, attention_mask, logits, version)

    def _start_rows(self, requests: list[_Request], version: int):
        """Prefill ``requests`` (left-padded) and sample their first tokens: (rows still going, cache, mask, their tokens)."""
        self.stats.requests += len(requests)
        self.stats.max_batch_seen = max(self.stats.max_batch_seen, len(requests))
        rows = [_Row(r, self._generator(r.sampling)) for r in requests]
        width = max(len(r.prompt_ids) for r in requests)
        input_ids = torch.full((len(rows), width), self._pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, request in enumerate(requests):
            input_ids[i, width - len(request.prompt_ids) :] = torch.tensor(request.prompt_ids)
            attention_mask[i, width - len(request.prompt_ids) :] = 1
        # Left padding: positions count real tokens only, so each row sees the positions it would unpadded.
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        input_ids, attention_mask, position_ids = (t.to(self.device) for t in (input_ids, attention_mask, position_ids))
        images = self._image_inputs(requests, input_ids, attention_mask, rows)
        if images:
            position_ids = images.pop("position_ids")
        cache = DynamicCache(config=self.model.config)
        logits = self._forward(input_ids, attention_mask, position_ids, cache, images)
        return self._advance(rows, cache, attention_mask, logits, version)

    def _forward(self, input_ids, attention_mask, position_ids, cache, images: dict) -> torch.Tensor:
        """The last position's logits (float32) of one forward pass, which extends ``cache``."""
        return (
            self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                cache=cache,
                use_cache=True,
                logits_to_keep=1,
                **images,
            )
            .logits[:, -1]
            .float()
        )

    def _advance(self, rows: list[_Row], cache, attention_mask: torch.Tensor, logits: torch.Tensor, version: int):
        """Sample each row's next token, answer the rows that finished, and drop them from the batch.

        Returns the rows still going, the cache and mask cut to them, and their sampled tokens
        (``None`` when none is left)."""
        tokens, logprobs, entropies, top = self._sample(logits, rows)
        self.stats.generated_tokens += len(rows)
        active = []
        for i, (row, token, logprob, entropy) in enumerate(
            zip(rows, tokens.tolist(), logprobs.tolist(), entropies.tolist())
        ):
            row.token_ids.append(token)
            row.logprobs.append(logprob)
            row.entropies.append(entropy)
            if row.request.sampling.top_logprobs:
                ids, values = top[i]
                row.top.append(
                    list(zip(ids[: row.request.sampling.top_logprobs], values[: row.request.sampling.top_logprobs]))
                )
            reason = self._finish_reason(row)
            if reason is None:
                active.append(i)
            else:  # answered now, not when the slowest row of the batch is done
                row.request.future.set_result(
                    Completion(
                        text=self.chat_format.decode(row.token_ids),
                        token_ids=row.token_ids,
                        logprobs=row.logprobs,
                        finish_reason=reason,
                        policy_version=version,
                        entropy=math.fsum(row.entropies) / len(row.entropies),
                        top_logprobs=row.top,
                    )
                )
        if not active:
            return [], cache, attention_mask, None
        if len(active) < len(rows):  # drop finished rows so they cost no more compute
            keep = torch.tensor(active, device=self.device)
            cache.batch_select_indices(keep)
            attention_mask, tokens = attention_mask[keep], tokens[keep]
            rows = [rows[i] for i in active]
        return rows, cache, attention_mask, tokens

    def _can_join(self, cache) -> bool:
        """Whether requests may join this batch: a text model whose cache is plain full-attention layers.

        Joining left-pads one cache to the other's length; a sliding-window layer's window, or a
        VLM's per-batch M-RoPE state, would not survive that, so those batches take no joiners."""
        return self._vision is None and all(type(layer) is DynamicLayer for layer in cache.layers)

    def _joiners(self, running: int) -> list[_Request]:
        """Requests queued since the batch began, up to the free rows (a close request is kept for :meth:`_serve`)."""
        joiners: list[_Request] = []
        if self._updates_waiting:  # new weights are waiting for this batch to end
            return joiners
        while running + len(joiners) < self.max_batch_size and not self._close_seen:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _CLOSE:
                self._close_seen = True
            elif item.future.set_running_or_notify_cancel():  # a caller cancelled while queued: dropped
                joiners.append(item)
        return joiners

    def _image_inputs(
        self, requests: list[_Request], input_ids: torch.Tensor, attention_mask: torch.Tensor, rows: list[_Row]
    ) -> dict:
        """A VLM batch's prefill inputs: pixel values and grids of every row's images, and M-RoPE positions
        (3 × batch × width), each row's position offset set on its :class:`_Row`. Empty for a text model."""
        vision = self._vision
        if vision is None:
            return {}
        inputs: dict = {}
        images = [data for request in requests for data in request.images]
        if images:
            pixels = vision.image_inputs(images)
            inputs = {
                "pixel_values": pixels["pixel_values"].to(self.device),
                "image_grid_thw": pixels["image_grid_thw"].to(self.device),
            }
        # Left padding is the pad id, never an image token, so padded positions are text (and masked).
        token_types = (input_ids == vision.image_token_id).long()
        position_ids, deltas = self.model.model.get_rope_index(
            input_ids, token_types, image_grid_thw=inputs.get("image_grid_thw"), attention_mask=attention_mask
        )
        for row, delta in zip(rows, deltas[:, 0].tolist()):
            row.rope_delta = int(delta)
        return {**inputs, "position_ids": position_ids}

    def _generator(self, sampling: SamplingParams) -> torch.Generator | None:
        if sampling.temperature == 0:
            return None
        generator = torch.Generator(device=self.device)
        if sampling.seed is not None:
            generator.manual_seed(sampling.seed)
        elif self._seeds is not None:
            generator.manual_seed(self._seeds.getrandbits(63))
        else:
            generator.seed()
        return generator

    def _sample(self, logits: torch.Tensor, rows: list[_Row]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list]:
        """One token per row, with its logprob, the entropy of the distribution (before truncation) and,
        for the rows that ask, the (ids, logprobs) of its most likely tokens (an empty list when none asks)."""
        # Every whole-vocabulary op counts (on a busy CPU each costs a thread handoff): those that would
        # change nothing (a division by 1, a greedy argmax with no greedy row) are skipped.
        temperatures = [r.request.sampling.temperature or 1.0 for r in rows]  # greedy rows: raw logits
        scaled = logits
        if any(t != 1.0 for t in temperatures):
            scaled = logits / torch.tensor(temperatures, device=logits.device)[:, None]
        logprobs = scaled.log_softmax(-1)
        probs = logprobs.exp()
        entropy = torch.special.entr(probs).sum(-1)
        weights = self._truncate(probs, rows)
        if self._banned_ids is not None:  # a truncation too: the logprobs above keep the full distribution
            weights = weights.index_fill(-1, self._banned_ids, 0.0)
            logits = logits.index_fill(-1, self._banned_ids, -math.inf)
        # Exponential race (Gumbel-max): argmax(p / E) with E ~ Exp(1) draws from p. Unlike
        # inverse-CDF sampling it needs no sort, and the noise is indexed by token id, so a
        # seeded row draws the same token whether or not its batch needed sorting for top-k/top-p.
        noise = torch.empty_like(probs)
        smallest = torch.finfo(noise.dtype).tiny
        for i, row in enumerate(rows):
            if row.generator is not None:
                # Guard against a 0 draw: 0/0 would be NaN, which argmax picks, even for a truncated token.
                noise[i].exponential_(generator=row.generator).clamp_(min=smallest)
            else:
                noise[i] = 1.0  # a greedy row: its token is the argmax below
        tokens = (weights / noise).argmax(-1)
        greedy = [row.generator is None for row in rows]
        if any(greedy):
            tokens = torch.where(torch.tensor(greedy, device=logits.device), logits.argmax(-1), tokens)
        most = max(r.request.sampling.top_logprobs for r in rows)
        top = []
        if most:
            values, ids = logprobs.topk(min(most, logprobs.shape[-1]), dim=-1)
            top = list(zip(ids.tolist(), values.tolist()))
        return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1), entropy, top

    @staticmethod
    def _truncate(probs: torch.Tensor, rows: list[_Row]) -> torch.Tensor:
        """``probs`` with the tokens outside each row's top-k, then top-p, set to 0 (unnormalised)."""
        top_k = [r.request.sampling.top_k for r in rows]
        top_p = [r.request.sampling.top_p for r in rows]
        if not any(top_k) and min(top_p) >= 1:
            return probs
        vocab = probs.shape[-1]
        sorted_probs, order = probs.sort(-1, descending=True)
        rank = torch.arange(vocab, device=probs.device)
        k = torch.tensor([k if 0 < k < vocab else vocab for k in top_k], device=probs.device)
        sorted_probs = sorted_probs.masked_fill(rank >= k[:, None], 0.0)
        # top_p = 1 must keep everything, even where rounding brings the cumulative sum to 1 early.
        p = torch.tensor([p if p < 1 else math.inf for p in top_p], device=probs.device)
        renormalised = sorted_probs / sorted_probs.sum(-1, keepdim=True)
        mass_before = renormalised.cumsum(-1) - renormalised  # the most likely token always stays
        sorted_probs = sorted_probs.masked_fill(mass_before >= p[:, None], 0.0)
        return torch.zeros_like(probs).scatter(-1, order, sorted_probs)

    def _finish_reason(self, row: _Row) -> str | None:
        sampling = row.request.sampling
        if row.token_ids[-1] in self.chat_format.stop_token_ids:
            return "stop"
        if sampling.stop:
            # The whole completion is decoded: a stop string can span tokens, and byte-level
            # tokens only form characters together.
            text = self.chat_format.decode(row.token_ids)
            if any(s in text for s in sampling.stop):
                return "stop"
        total = len(row.request.prompt_ids) + len(row.token_ids)
        if len(row.token_ids) >= sampling.max_tokens:
            return "length"
        if self._max_positions is not None and total >= self._max_positions:
            return "length"
        return None


def _merge(running: tuple, joining: tuple) -> tuple:
    """One batch from two (rows, cache, mask, tokens) states: the shorter cache and mask left-padded (masked) to the longer."""
    if not joining[0]:
        return running
    if not running[0]:
        return joining
    (rows_a, cache_a, mask_a, tokens_a), (rows_b, cache_b, mask_b, tokens_b) = running, joining
    length = max(mask_a.shape[1], mask_b.shape[1])

    def pad(tensor: torch.Tensor, dim: int) -> torch.Tensor:
        missing = length - tensor.shape[dim]
        if not missing:
            return tensor
        shape = list(tensor.shape)
        shape[dim] = missing
        return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)

    for layer_a, layer_b in zip(cache_a.layers, cache_b.layers):
        layer_a.keys = torch.cat([pad(layer_a.keys, -2), pad(layer_b.keys, -2)])
        layer_a.values = torch.cat([pad(layer_a.values, -2), pad(layer_b.values, -2)])
    mask = torch.cat([pad(mask_a, 1), pad(mask_b, 1)])
    return rows_a + rows_b, cache_a, mask, torch.cat([tokens_a, tokens_b])
