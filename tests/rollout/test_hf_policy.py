"""HFPolicy against the real tiny Qwen2: exact logprobs under left padding, batching, seeding, stopping, weight updates."""

import asyncio
import copy
import dataclasses

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentgym.models import tiny_model_path
from agentgym.rollout.chat import TemplateError
from agentgym.rollout.hf_policy import HFPolicy
from agentgym.rollout.policy import PolicyError, SamplingParams


@pytest.fixture(scope="module")
def tiny():
    path = tiny_model_path()
    return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


@pytest.fixture
async def policy(tiny):
    # A long batch window so that requests gathered together always land in one batch.
    async with HFPolicy.from_model(*tiny, batch_wait_ms=50) as policy:
        yield policy


def prompts(policy, sizes=(1, 6, 15, 30)):
    """Chat prompts of different lengths, so a batch of them is left-padded."""
    return [policy.chat_format.prompt_ids([{"role": "user", "content": "list the files " * n}]) for n in sizes]


def teacher_forced(model, prompt_ids, completion_ids, temperature):
    """log_softmax(logits / T) over the completion positions, from one un-padded forward pass."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + completion_ids])).logits[0, len(prompt_ids) - 1 : -1].float()
    return (logits / (temperature or 1.0)).log_softmax(-1)


async def test_logprobs_and_entropy_match_an_unpadded_forward_pass(policy, tiny):
    batch = prompts(policy)
    assert len({len(p) for p in batch}) == len(batch)
    params = [
        SamplingParams(max_tokens=12, temperature=0.7, seed=1),
        SamplingParams(max_tokens=12, temperature=1.3, top_k=5, seed=2),
        SamplingParams(max_tokens=12, temperature=0.0),
        SamplingParams(max_tokens=12, temperature=1.0, top_p=0.05, seed=3),
    ]
    completions = await asyncio.gather(*[policy.generate(p, s) for p, s in zip(batch, params)])
    assert policy.stats.batches == 1 and policy.stats.max_batch_seen == 4

    for prompt, sampling, completion in zip(batch, params, completions):
        assert len(completion.token_ids) == len(completion.logprobs) > 0
        logprobs = teacher_forced(tiny[0], prompt, completion.token_ids, sampling.temperature)
        sampled = torch.tensor(completion.token_ids)
        expected = logprobs.gather(-1, sampled[:, None]).squeeze(-1)
        torch.testing.assert_close(torch.tensor(completion.logprobs), expected, atol=1e-4, rtol=0)
        entropy = torch.special.entr(logprobs.exp()).sum(-1).mean().item()
        assert completion.entropy == pytest.approx(entropy, abs=1e-4)
        # Truncation restricts which tokens are drawn, not the logprobs reported for them.
        ranks = (logprobs > expected[:, None]).sum(-1)  # how many tokens were more likely
        if sampling.temperature == 0:
            assert ranks.tolist() == [0] * len(ranks)
        if sampling.top_k:
            assert ranks.max() < sampling.top_k
        if sampling.top_p < 1:
            mass_before = (logprobs.exp() * (logprobs > expected[:, None])).sum(-1)
            assert mass_before.max() < sampling.top_p
        assert completion.text == policy.chat_format.decode(completion.token_ids)
        assert completion.policy_version == 0


async def test_greedy_batched_equals_one_at_a_time(policy):
    batch = prompts(policy)
    greedy = SamplingParams(max_tokens=16, temperature=0)
    together = await asyncio.gather(*[policy.generate(p, greedy) for p in batch])
    assert policy.stats.batches == 1
    alone = [await policy.generate(p, greedy) for p in batch]
    assert policy.stats.batches == 1 + len(batch)
    for a, b in zip(together, alone):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(a.logprobs, b.logprobs, atol=1e-4, rtol=0)


async def test_a_whole_group_in_one_batch_decodes_greedily_as_one_at_a_time(tiny):
    # A trainer's group (tasks × generations) goes to the policy at once: 32 rows, 8 prompt lengths.
    async with HFPolicy.from_model(*tiny, max_batch_size=32, batch_wait_ms=200) as policy:
        batch = prompts(policy, sizes=(1, 2, 3, 5, 8, 13, 21, 34)) * 4
        greedy = SamplingParams(max_tokens=8, temperature=0)
        together = await asyncio.gather(*[policy.generate(p, greedy) for p in batch])
        assert policy.stats.batches == 1 and policy.stats.max_batch_seen == 32
        alone = [await policy.generate(p, greedy) for p in batch[:8]]
    for a, b in zip(together, alone * 4):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(a.logprobs, b.logprobs, atol=1e-4, rtol=0)


async def test_requests_arriving_mid_decode_join_the_batch_and_decode_as_alone(tiny):
    # Episodes reset their envs before they ask, so a group's requests trickle in: late ones join the
    # batch at its next decode step, a shorter cache left-padded to the batch's, or the batch's to a longer one.
    async with HFPolicy.from_model(*tiny, batch_wait_ms=0) as policy:
        first_prompt, short, long = prompts(policy, sizes=(3, 1, 30))
        greedy = SamplingParams(max_tokens=48, temperature=0)
        seeded = SamplingParams(max_tokens=16, temperature=1.0, top_p=0.9, seed=5)
        first = asyncio.ensure_future(policy.generate(first_prompt, greedy))
        while policy.stats.generated_tokens < 4:  # the first batch is decoding
            await asyncio.sleep(0.001)
        joined = await asyncio.gather(first, policy.generate(short, greedy), policy.generate(long, seeded))
        assert policy.stats.batches == 1 and policy.stats.joined == 2 and policy.stats.max_batch_seen == 3
        alone = [await policy.generate(p, s) for p, s in ((first_prompt, greedy), (short, greedy), (long, seeded))]
    assert len(alone[0].token_ids) == 48  # the first request was still decoding when the others came
    for a, b in zip(joined, alone):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(a.logprobs, b.logprobs, atol=1e-4, rtol=0)


async def test_a_steady_stream_of_joiners_does_not_hold_off_a_weight_update(tiny):
    # SAO's producer keeps requests in flight all the time: were joiners always taken, the batch
    # would never end and update_weights (which waits for it) would never run.
    async with HFPolicy.from_model(*tiny, max_batch_size=4, batch_wait_ms=0) as policy:
        prompt = prompts(policy, sizes=(2,))[0]
        stop = asyncio.Event()
        versions: list[int] = []

        async def feed(tokens: int):
            while not stop.is_set():
                versions.append(
                    (await policy.generate(prompt, SamplingParams(max_tokens=tokens, temperature=0))).policy_version
                )

        # Twice as many callers as rows: a request is always queued when a row finishes.
        feeders = [asyncio.ensure_future(feed(n)) for n in (2, 3, 5, 7, 11, 13, 17, 19)]
        while policy.stats.joined < 8:  # rows finishing at different steps, their callers' next requests joining
            await asyncio.sleep(0.001)
        await asyncio.wait_for(asyncio.to_thread(policy.update_weights, policy.model), timeout=60)
        while versions[-1] != 1:  # requests keep flowing, now from the new weights
            await asyncio.sleep(0.001)
        stop.set()
        await asyncio.gather(*feeders)
    assert policy.version == 1 and policy.stats.batches >= 2


async def test_a_seeded_policy_repeats_its_unseeded_requests_samples(tiny):
    # A trainer passes its seed: the same run samples the same rollouts (requests taken in the same order).
    target = prompts(HFPolicy.from_model(*tiny), sizes=(4,))[0]
    unseeded = SamplingParams(max_tokens=8, temperature=1.0)

    async def samples(seed):
        async with HFPolicy.from_model(*tiny, seed=seed) as policy:
            return [(await policy.generate(target, unseeded)).token_ids for _ in range(4)]

    first = await samples(7)
    assert await samples(7) == first
    assert len({tuple(t) for t in first}) > 1  # successive requests draw differently
    assert await samples(8) != first
    assert await samples(None) != first


async def test_seeded_sampling_is_reproducible_across_batch_compositions(policy):
    target, *others = prompts(policy, sizes=(4, 1, 25, 40))
    seeded = SamplingParams(max_tokens=16, temperature=1.0, top_p=0.95, seed=1234)
    alone = await policy.generate(target, seeded)
    # Other rows with and without their own seeds, needing top-k sorting or none, longer and shorter.
    mixed = await asyncio.gather(
        policy.generate(others[0], SamplingParams(max_tokens=3, temperature=0.5, top_k=3)),
        policy.generate(target, seeded),
        policy.generate(others[1], SamplingParams(max_tokens=20, temperature=0)),
        policy.generate(others[2], SamplingParams(max_tokens=8, seed=1234)),
    )
    assert mixed[1].token_ids == alone.token_ids
    torch.testing.assert_close(mixed[1].logprobs, alone.logprobs, atol=1e-4, rtol=0)
    other_seed = await policy.generate(target, SamplingParams(max_tokens=16, temperature=1.0, top_p=0.95, seed=99))
    assert other_seed.token_ids != alone.token_ids


async def test_concurrent_requests_are_batched(tiny):
    async with HFPolicy.from_model(*tiny, max_batch_size=4, batch_wait_ms=50) as policy:
        batch = prompts(policy, sizes=(1, 2, 3, 5, 8, 13, 21, 34))
        completions = await asyncio.gather(
            *[policy.generate(p, SamplingParams(max_tokens=6, seed=i)) for i, p in enumerate(batch)]
        )
        stats = policy.stats
        assert stats.requests == 8 and stats.batches == 2 and stats.max_batch_seen == 4
        assert stats.generated_tokens == sum(len(c.token_ids) for c in completions)


def eos_after(model, prompt_ids, completion_ids):
    """A copy of the model that, sampling ``completion_ids`` after ``prompt_ids`` as before, then emits eos.

    The logits are the final hidden state times the (tied) embedding matrix. The eos row is set
    orthogonal to the hidden states that predicted ``completion_ids`` (so only eos's own logit
    changes there, to 0, and the sampler's exponential race over the other tokens is untouched)
    and aligned with the next one (logit 30, probability ~1). ``prompt_ids`` must not contain eos,
    whose input embedding changes too.
    """
    model = copy.deepcopy(model)
    ids = list(prompt_ids) + list(completion_ids)
    with torch.no_grad():
        hidden = model.model(torch.tensor([ids])).last_hidden_state[0, len(prompt_ids) - 1 :].double()
        basis, _ = torch.linalg.qr(hidden[:-1].T)
        direction = hidden[-1] - basis @ (basis.T @ hidden[-1])
        model.model.embed_tokens.weight[model.config.eos_token_id] = direction * (30.0 / direction.dot(hidden[-1]))
    return model


async def test_stops_on_eos_stop_strings_and_length(tiny):
    model, tokenizer = tiny
    prompt = tokenizer("def main(argv):\n    return", add_special_tokens=False)["input_ids"]
    sampling = SamplingParams(max_tokens=3, temperature=1.0, seed=5)
    async with HFPolicy.from_model(model, tokenizer) as policy:
        stop_ids = policy.chat_format.stop_token_ids
        free = await policy.generate(prompt, SamplingParams(max_tokens=12, temperature=0))
        assert free.finish_reason == "length" and len(free.token_ids) == 12
        assert not set(free.token_ids) & set(stop_ids)

        # A stop string completed by the 3rd token: that token is the last one, and the text keeps it.
        stop = policy.chat_format.decode(free.token_ids[:3])
        stopped = await policy.generate(prompt, SamplingParams(max_tokens=12, temperature=0, stop=("@@", stop)))
        assert (stopped.finish_reason, stopped.token_ids) == ("stop", free.token_ids[:3])
        assert stop in stopped.text

        # The context is the last limit: 2 positions left, 2 tokens.
        room = model.config.max_position_embeddings
        capped = await policy.generate((prompt * room)[: room - 2], SamplingParams(max_tokens=10, temperature=0))
        assert capped.finish_reason == "length" and len(capped.token_ids) == 2

        head = await policy.generate(prompt, sampling)
        assert not set(head.token_ids) & set(stop_ids)

    async with HFPolicy.from_model(eos_after(model, prompt, head.token_ids), tokenizer) as policy:
        eos = policy.chat_format.eos_token_id
        assert eos not in prompt
        completion = await policy.generate(prompt, dataclasses.replace(sampling, max_tokens=10))
        assert completion.finish_reason == "stop"
        assert completion.token_ids == head.token_ids + [eos]
        assert completion.text == policy.chat_format.decode(head.token_ids)
        assert completion.logprobs[-1] > -1e-3


async def test_bad_requests_fail_with_policy_error(policy):
    with pytest.raises(PolicyError, match="empty prompt"):
        await policy.generate([], SamplingParams())
    with pytest.raises(PolicyError, match="context"):
        await policy.generate([1] * policy.model.config.max_position_embeddings, SamplingParams())
    with pytest.raises(PolicyError, match="vocabulary"):
        await policy.generate([1, 10**7], SamplingParams())
    with pytest.raises(PolicyError, match="seed"):
        await policy.generate([1], SamplingParams(seed=2**70))


async def test_worker_errors_fail_their_batch_and_the_worker_carries_on(tiny):
    model, tokenizer = tiny
    async with HFPolicy.from_model(copy.deepcopy(model), tokenizer, batch_wait_ms=50) as policy:
        prompt = prompts(policy, sizes=(2,))[0]
        # A trainer sharing the model changed part of it to another dtype: the forward pass raises.
        policy.model.model.embed_tokens.to(torch.float64)
        failed = await asyncio.gather(
            *[policy.generate(prompt, SamplingParams(max_tokens=2)) for _ in range(3)], return_exceptions=True
        )
        assert all(isinstance(e, PolicyError) and "generation failed" in str(e) for e in failed)
        policy.model.model.embed_tokens.to(torch.float32)
        assert len((await policy.generate(prompt, SamplingParams(max_tokens=2))).token_ids) == 2


async def test_update_weights_bumps_version_and_changes_outputs(tiny):
    model, tokenizer = tiny
    policy = HFPolicy.from_model(copy.deepcopy(model), tokenizer)
    prompt = prompts(policy, sizes=(3,))[0]
    greedy = SamplingParams(max_tokens=8, temperature=0)
    before = await policy.generate(prompt, greedy)
    assert before.policy_version == 0

    torch.manual_seed(0)
    perturbed = {
        k: v + 0.05 * torch.randn_like(v) for k, v in model.state_dict().items() if k != "lm_head.weight"
    }  # tied to the embeddings, which carry it
    policy.update_weights(perturbed)
    assert policy.version == 1
    after = await policy.generate(prompt, greedy)
    assert after.policy_version == 1 and after.token_ids != before.token_ids

    policy.update_weights(model, version=7)
    assert policy.version == 7
    restored = await policy.generate(prompt, greedy)
    assert restored.policy_version == 7 and restored.token_ids == before.token_ids
    with pytest.raises(ValueError, match="unexpected"):
        policy.update_weights({"not.a.weight": torch.zeros(1)})

    worker = policy._worker
    assert worker.is_alive()
    await policy.aclose()
    assert not worker.is_alive()
    with pytest.raises(PolicyError, match="closed"):
        await policy.generate(prompt, greedy)


def test_loads_from_a_local_path():
    policy = HFPolicy(tiny_model_path(), device="cpu")
    assert policy.device == torch.device("cpu") and policy.supports_tokens
    assert policy.name == tiny_model_path().name
    assert policy._worker is None  # no thread until the first request


def test_rejects_templates_that_rewrite_history(tiny):
    model, tokenizer = tiny
    tokenizer = copy.deepcopy(tokenizer)
    # Earlier assistant turns are dropped: rendering k+1 messages no longer extends rendering k.
    tokenizer.chat_template = (
        "{%- for m in messages %}{%- if m.role != 'assistant' or loop.last %}"
        "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )
    with pytest.raises(TemplateError, match="prefix-preserving"):
        HFPolicy.from_model(model, tokenizer)
