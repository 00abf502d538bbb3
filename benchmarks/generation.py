"""HFPolicy's batched decoding against transformers' ``model.generate`` on the same batch: a trainer's group, at once and trickling in.

The work: ``--requests`` copies of one chat prompt, ``--max-tokens`` tokens each at temperature 1,
from the tiny local model (:mod:`agentgym.models.tiny`) on CPU. Two shapes of arrival:

* **at once**: every request queued together (one batch), against one ``model.generate`` call
  on the same left-padded batch (``do_sample``, no top-k/top-p), which returns no logprobs;
* **trickling**: request *i* sent after a uniform 0–``--spread-ms`` ms delay, as a trainer's
  episodes reach the policy once their envs have reset. Requests that arrive while a batch
  decodes join it; the number of decode batches is printed.

Rounds are interleaved (ours, generate, ours trickling) and the first is left out. Prints each
round, the medians and a JSON line.

    .venv/bin/python benchmarks/generation.py --rounds 8
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from agentgym.models import tiny_model_path
from agentgym.rollout.hf_policy import HFPolicy
from agentgym.rollout.policy import SamplingParams

PROMPT = [{"role": "user", "content": "Reply in capital letters."}]


async def _group(policy: HFPolicy, ids: list[int], sampling: SamplingParams, delays: list[float]) -> float:
    async def one(delay: float):
        await asyncio.sleep(delay)
        return await policy.generate(ids, sampling)

    started = time.perf_counter()
    await asyncio.gather(*(one(d) for d in delays))
    return time.perf_counter() - started


async def _run(args) -> dict:
    path = tiny_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    policy = HFPolicy.from_model(model, tokenizer, max_batch_size=args.requests, seed=0)
    ids = policy.chat_format.prompt_ids(PROMPT)
    sampling = SamplingParams(max_tokens=args.max_tokens, temperature=1.0)
    config = GenerationConfig(
        max_new_tokens=args.max_tokens,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=policy.chat_format.stop_token_ids,
    )
    batch = torch.tensor([ids] * args.requests)

    def generate() -> float:
        started = time.perf_counter()
        with torch.no_grad():
            model.generate(input_ids=batch, attention_mask=torch.ones_like(batch), generation_config=config)
        return time.perf_counter() - started

    rng = random.Random(0)
    rounds = []
    async with policy:
        for _ in range(args.rounds):
            at_once = await _group(policy, ids, sampling, [0.0] * args.requests)
            theirs = generate()
            before = policy.stats.batches
            delays = [rng.uniform(0, args.spread_ms / 1000) for _ in range(args.requests)]
            trickling = await _group(policy, ids, sampling, delays)
            rounds.append(
                {
                    "ours_s": at_once,
                    "generate_s": theirs,
                    "ours_trickling_s": trickling,
                    "trickling_batches": policy.stats.batches - before,
                }
            )
            print(
                f"ours {at_once:.3f} s, generate {theirs:.3f} s (ratio {at_once / theirs:.2f}), "
                f"trickling {trickling:.3f} s in {rounds[-1]['trickling_batches']} batch(es)",
                file=sys.stderr,
            )
    kept = rounds[1:]
    ratios = [r["ours_s"] / r["generate_s"] for r in kept]
    return {
        "work": {"requests": args.requests, "max_tokens": args.max_tokens, "spread_ms": args.spread_ms},
        "rounds": kept,
        "ours_over_generate": {"median": statistics.median(ratios), "per_round": ratios},
        "median_s": {k: statistics.median(r[k] for r in kept) for k in ("ours_s", "generate_s", "ours_trickling_s")},
        # On a shared machine the fastest round is the one least disturbed by other jobs.
        "min_s": {k: min(r[k] for r in kept) for k in ("ours_s", "generate_s", "ours_trickling_s")},
        "joined": policy.stats.joined,
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--spread-ms", type=float, default=15.0, help="trickling requests arrive over this long")
    parser.add_argument("--rounds", type=int, default=8, help="interleaved rounds (the first is left out)")
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (the first is left out)")
    torch.manual_seed(0)
    report = asyncio.run(_run(args))
    ratio = report["ours_over_generate"]
    print(
        f"HFPolicy ÷ model.generate (time, same batch): {ratio['median']:.2f}× (per round: "
        + ", ".join(f"{r:.2f}" for r in ratio["per_round"])
        + f"); fastest rounds: ours {report['min_s']['ours_s']:.3f} s, generate {report['min_s']['generate_s']:.3f} s, "
        + f"trickling {report['min_s']['ours_trickling_s']:.3f} s; {report['joined']} requests joined a running batch"
    )
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
