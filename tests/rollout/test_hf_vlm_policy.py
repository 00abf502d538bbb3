"""HFPolicy on the real tiny Qwen2-VL: image prompts batched with text ones, exact logprobs a trainer can recompute
from a stored trajectory (ids + images by hash through the image processor), and clear errors for bad images."""

import asyncio
import base64
import copy
import json

import numpy as np
import pytest
import torch
from transformers import AutoImageProcessor, AutoModelForImageTextToText, AutoTokenizer

from agentgym.models import tiny_model_path, tiny_vlm_path
from agentgym.rollout.hf_policy import HFPolicy
from agentgym.rollout.policy import PolicyError, SamplingParams
from agentgym.rollout.store import TrajectoryStore
from agentgym.rollout.trajectory import Trajectory, Turn
from agentgym.rollout.vision import VisionChatFormat, image_bytes, image_hash


def screenshot(seed: int, height: int, width: int) -> np.ndarray:
    return np.random.RandomState(seed).randint(0, 256, (height, width, 3), dtype=np.uint8)


def data_url(image: np.ndarray) -> str:
    return "data:image/png;base64," + base64.b64encode(image_bytes(image)).decode()


def user(text: str, *images) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text}] + [image_part(i) for i in images]}


def image_part(image: np.ndarray) -> dict:
    return {"type": "image_url", "image_url": {"url": data_url(image)}}


@pytest.fixture(scope="module")
def tiny_vlm():
    path = tiny_vlm_path()
    model = AutoModelForImageTextToText.from_pretrained(path).eval()
    return model, AutoTokenizer.from_pretrained(path), AutoImageProcessor.from_pretrained(path)


@pytest.fixture
async def policy(tiny_vlm):
    model, tokenizer, image_processor = tiny_vlm
    async with HFPolicy.from_model(model, tokenizer, image_processor=image_processor, batch_wait_ms=50) as policy:
        yield policy


def recomputed_logprobs(model, chat_format: VisionChatFormat, prompt_ids, completion_ids, images, temperature=1.0):
    """What a trainer computes: one un-padded forward over prompt + completion, pixel values from the images,
    M-RoPE positions left to the model (from mm_token_type_ids), log_softmax(logits / T) of the sampled tokens."""
    ids = list(prompt_ids) + list(completion_ids)
    inputs = chat_format.image_inputs(images) if images else {}
    with torch.no_grad():
        logits = model(
            input_ids=torch.tensor([ids]),
            mm_token_type_ids=torch.tensor([chat_format.mm_token_type_ids(ids)]),
            **inputs,
        ).logits[0, len(prompt_ids) - 1 : -1]
    logprobs = (logits.float() / (temperature or 1.0)).log_softmax(-1)
    return logprobs.gather(-1, torch.tensor(completion_ids)[:, None]).squeeze(-1)


async def test_image_prompts_batch_with_text_ones_and_logprobs_match_a_trainer_forward(policy, tiny_vlm):
    fmt = policy.chat_format
    assert policy.accepts_images and isinstance(fmt, VisionChatFormat)
    wide, square, small = screenshot(0, 64, 96), screenshot(1, 256, 256), screenshot(2, 64, 64)
    conversations = [
        [user("Click the button.", wide)],
        [{"role": "system", "content": "You see screens."}, user("Compare these two:", square, small)],
        [{"role": "user", "content": "No screenshot this time."}],
    ]
    inputs = [fmt.prompt_inputs(c) for c in conversations]
    # The processor's token counts: 64x96 -> 2x3 merged patches, 256x256 capped at 16, 64x64 -> 2x2.
    assert [fmt.image_runs(ids) for ids, _ in inputs] == [[6], [16, 4], []]
    assert len({len(ids) for ids, _ in inputs}) == 3  # left padding in the batch
    params = [
        SamplingParams(max_tokens=8, temperature=0.8, seed=1),
        SamplingParams(max_tokens=8, temperature=1.2, top_k=7, seed=2),
        SamplingParams(max_tokens=8, temperature=0.0),
    ]
    completions = await asyncio.gather(
        *[policy.generate(ids, s, images=images) for (ids, images), s in zip(inputs, params)]
    )
    assert policy.stats.batches == 1 and policy.stats.max_batch_seen == 3
    for (ids, images), sampling, completion in zip(inputs, params, completions):
        assert len(completion.token_ids) == len(completion.logprobs) == 8
        expected = recomputed_logprobs(tiny_vlm[0], fmt, ids, completion.token_ids, images, sampling.temperature)
        torch.testing.assert_close(torch.tensor(completion.logprobs), expected, atol=1e-4, rtol=0)


async def test_the_pixels_reach_the_model(policy, tiny_vlm):
    """Same ids, other pixels of the same size: the teacher-forced logprobs differ, so the images are not ignored."""
    fmt = policy.chat_format
    ids, images = fmt.prompt_inputs([user("What changed?", screenshot(3, 64, 64))])
    _, other = fmt.prompt_inputs([user("What changed?", screenshot(4, 64, 64))])
    completion = await policy.generate(ids, SamplingParams(max_tokens=6, temperature=0.0), images=images)
    same = recomputed_logprobs(tiny_vlm[0], fmt, ids, completion.token_ids, images)
    changed = recomputed_logprobs(tiny_vlm[0], fmt, ids, completion.token_ids, other)
    assert (same - changed).abs().max() > 1e-3


async def test_a_stored_trajectory_recomputes_its_logprobs(policy, tiny_vlm, tmp_path):
    """Two turns built as the agent loop builds them (prompt_inputs, then continuation_inputs), stored, read back by
    another store object; every completion's logprobs are recomputed from the ids and the images fetched by hash."""
    fmt = policy.chat_format
    first, second = screenshot(5, 96, 128), screenshot(6, 128, 96)
    messages = [{"role": "system", "content": "Operate the desktop."}, user("The screen:", first)]
    sampling = SamplingParams(max_tokens=10, temperature=1.0, seed=7)
    prompt_ids, images = fmt.prompt_inputs(messages)
    rendered = fmt.render_prompt(messages)
    mask = [0] * len(prompt_ids)
    turns = []
    for turn in range(2):
        completion = await policy.generate(prompt_ids, sampling, images=images)
        assert fmt.image_token_id not in completion.token_ids
        turns.append(
            Turn(
                prompt_ids=list(prompt_ids),
                completion_ids=completion.token_ids,
                logprobs=completion.logprobs,
                prompt_mask=list(mask),
                image_hashes=[image_hash(data) for data in images],
            )
        )
        if turn == 1:
            break
        new = [{"role": "tool", "content": [{"type": "text", "text": "clicked"}, image_part(second)]}]
        tail, rendered, new_images = fmt.continuation_inputs(messages, completion.token_ids, new, rendered=rendered)
        messages += [{"role": "assistant", "content": fmt.decode(completion.token_ids)}, *new]
        prompt_ids = prompt_ids + completion.token_ids + tail
        mask = mask + [1] * len(completion.token_ids) + [0] * len(tail)
        images = images + new_images
        # Token-exact: the concatenation is what rendering the whole conversation afresh gives.
        assert prompt_ids == fmt.prompt_ids(messages)
    all_images = {image_hash(data): data for data in images}
    trajectory = Trajectory(task_id="t", env_id="gui", turns=turns, images=all_images)

    path = tmp_path / "rollouts.jsonl"
    with TrajectoryStore(path) as store:
        store.append(trajectory)
        store.append(trajectory)  # the same images again: stored once
    assert sorted(p.name for p in store.images_dir.iterdir()) == sorted(all_images)
    line = json.loads(path.read_text().splitlines()[0])["record"]["turns"][1]
    assert line["image_hashes"] == {"shared": 1, "new": [image_hash(images[1])]}  # compact, like prompt_ids

    reader = TrajectoryStore(path)
    stored = reader.read()[0]
    assert stored == trajectory and stored.images == {}  # the bytes live beside the JSONL, by hash
    [sequence] = stored.sequences()
    assert sequence.image_hashes == list(all_images)
    pixels = [reader.image(h) for h in sequence.image_hashes]
    assert fmt.image_runs(sequence.input_ids) == [fmt.image_tokens(data) for data in pixels]
    # One forward over the whole training sequence, as a trainer runs it: every turn's span at once.
    ids = sequence.input_ids
    inputs = fmt.image_inputs(pixels)
    with torch.no_grad():
        logits = tiny_vlm[0](
            input_ids=torch.tensor([ids]), mm_token_type_ids=torch.tensor([fmt.mm_token_type_ids(ids)]), **inputs
        ).logits[0]
    logprobs = logits.float().log_softmax(-1)[:-1].gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1)
    for turn, (start, end) in zip(stored.turns, sequence.turn_spans):
        torch.testing.assert_close(torch.tensor(turn.logprobs), logprobs[start - 1 : end - 1], atol=1e-4, rtol=0)
    assert [sequence.logprobs[start:end] for start, end in sequence.turn_spans] == [t.logprobs for t in stored.turns]
    row = reader.sequences_dataset()[0]
    assert row["image_hashes"] == sequence.image_hashes


async def test_image_tokens_are_never_sampled_but_logprobs_keep_the_full_distribution(tiny_vlm):
    """The image token is made the model's favourite (its tied output row scaled up from the greedy token's):
    greedy decoding must pick another token, whose logprob is still taken under the untruncated distribution."""
    model, tokenizer, image_processor = tiny_vlm
    model = copy.deepcopy(model)
    async with HFPolicy.from_model(model, tokenizer, image_processor=image_processor) as policy:
        fmt = policy.chat_format
        ids = fmt.prompt_ids([{"role": "user", "content": "Say something."}])
        greedy = (await policy.generate(ids, SamplingParams(max_tokens=1, temperature=0.0))).token_ids[0]
        with torch.no_grad():
            weight = model.get_output_embeddings().weight
            weight[fmt.image_token_id] = 4 * weight[greedy]
        completion = await policy.generate(ids, SamplingParams(max_tokens=1, temperature=0.0))
        assert completion.token_ids[0] not in (fmt.image_token_id, fmt.video_token_id)
        expected = recomputed_logprobs(model, fmt, ids, completion.token_ids, [])
        torch.testing.assert_close(torch.tensor(completion.logprobs), expected, atol=1e-4, rtol=0)
        assert completion.logprobs[0] < -1  # the image token holds most of the mass it was not allowed to take


async def test_bad_images_fail_with_policy_error(policy):
    fmt = policy.chat_format
    ids, images = fmt.prompt_inputs([user("Look:", screenshot(8, 64, 64))])
    sampling = SamplingParams(max_tokens=2)
    with pytest.raises(PolicyError, match=r"runs of \[4\] <\|image_pad\|> tokens for 0 images"):
        await policy.generate(ids, sampling)
    with pytest.raises(PolicyError, match=r"for 2 images taking \[4, 4\]"):
        await policy.generate(ids, sampling, images=images * 2)
    with pytest.raises(PolicyError, match=r"for 1 images taking \[16\]"):  # another size: another token count
        await policy.generate(ids, sampling, images=[screenshot(8, 256, 256)])
    with pytest.raises(PolicyError, match="nothing is fetched"):
        await policy.generate(ids, sampling, images=["https://example.com/cat.png"])
    with pytest.raises(PolicyError, match="not a readable image"):
        await policy.generate(ids, sampling, images=[b"not a png"])
    with pytest.raises(PolicyError, match="H×W×3 uint8"):
        await policy.generate(ids, sampling, images=[np.zeros((8, 8), dtype=np.uint8)])
    # The worker is unharmed: the good request still runs.
    assert len((await policy.generate(ids, sampling, images=images)).token_ids) == 2


async def test_a_text_model_takes_no_images():
    async with HFPolicy(tiny_model_path(), device="cpu") as policy:
        assert not policy.accepts_images and not isinstance(policy.chat_format, VisionChatFormat)
        ids = policy.chat_format.prompt_ids([{"role": "user", "content": "hi"}])
        with pytest.raises(PolicyError, match="takes no images: it is a text-only model"):
            await policy.generate(ids, SamplingParams(max_tokens=2), images=[screenshot(9, 64, 64)])


def test_loads_a_vlm_checkpoint_from_a_local_path():
    policy = HFPolicy(tiny_vlm_path(), device="cpu")
    assert policy.accepts_images and policy.describe()["accepts_images"] is True
    assert type(policy.model).__name__ == "Qwen2VLForConditionalGeneration"
    asyncio.run(policy.aclose())


@pytest.mark.slow
async def test_an_agent_rollout_stored_and_read_back_recomputes_its_logprobs(policy, tiny_vlm, tmp_path):
    """The whole path: the agent loop in token mode with screenshots, the store, and a trainer's forward pass."""
    from agentgym.rollout.agent import Agent, AgentConfig
    from agentgym.rollout.images import ImageConfig
    from tests.helpers.counter import ScreenCounterEnv

    env = ScreenCounterEnv()
    try:
        config = AgentConfig(
            images=ImageConfig(max_side=128), max_turns=3, sampling=SamplingParams(max_tokens=8, seed=11)
        )
        trajectory = await Agent(policy, config).run(env, "reach-7")
    finally:
        env.close()
    with TrajectoryStore(tmp_path / "rollouts.jsonl") as store:
        store.append(trajectory)
    reader = TrajectoryStore(tmp_path / "rollouts.jsonl")
    [stored] = reader.read()
    [sequence] = stored.sequences()
    assert len(stored.turns) == 3 and len(sequence.image_hashes) == 3
    fmt = policy.chat_format
    ids, pixels = sequence.input_ids, [reader.image(h) for h in sequence.image_hashes]
    with torch.no_grad():
        logits = tiny_vlm[0](
            input_ids=torch.tensor([ids]),
            mm_token_type_ids=torch.tensor([fmt.mm_token_type_ids(ids)]),
            **fmt.image_inputs(pixels),
        ).logits[0]
    logprobs = logits.float().log_softmax(-1)[:-1].gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1)
    for turn, (start, end) in zip(stored.turns, sequence.turn_spans):
        torch.testing.assert_close(torch.tensor(turn.logprobs), logprobs[start - 1 : end - 1], atol=1e-4, rtol=0)
