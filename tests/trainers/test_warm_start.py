"""KeyChain's SFT warm start checks itself: a start whose samples do not solve enough unseen train tasks trains more rounds, then fails clearly; the record keys the cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentgym.train import load_config
from agentgym.trainers.warm_start import WARM_START_RECORD, WarmStartFailed, scripted_warm_start

CONFIG = Path(__file__).resolve().parents[2] / "examples" / "configs" / "keychain-tree_grpo.yaml"


@pytest.mark.slow
def test_a_start_below_the_bar_trains_more_rounds_from_its_weights_then_fails(tmp_path):
    config = load_config(CONFIG)
    out = tmp_path / "start"
    # 32 tasks x 2 epochs cannot teach the tiny model to solve every unseen task: the bar of 100% fails.
    settings = {"tasks": 32, "epochs": 2.0, "min_start_success": 1.0, "check_tasks": 8, "max_rounds": 2}
    with pytest.raises(WarmStartFailed, match=r"solved \d+% of 8 unseen train tasks when sampled after 2 round"):
        scripted_warm_start(out, config, **settings)
    rounds = json.loads((out / WARM_START_RECORD).read_text())["rounds"]
    assert [r["round"] for r in rounds] == [1, 2] and all(0.0 <= r["check_success"] < 1.0 for r in rounds)
    # Round 2 continued from round 1's weights: its first step's loss is below the random model's
    # (measured: 7.6 at round 1's first step, 6.5 at round 2's).
    assert rounds[1]["first_loss"] < rounds[0]["first_loss"] - 0.5

    # The same settings raise again from the record, without training.
    trained_at = (out / "model.safetensors").stat().st_mtime_ns
    with pytest.raises(WarmStartFailed, match="after 2 round"):
        scripted_warm_start(out, config, **settings)
    assert (out / "model.safetensors").stat().st_mtime_ns == trained_at

    # Other settings build the start anew: without a bar, one round and no check.
    assert scripted_warm_start(out, config, tasks=32, epochs=2.0) == out
    record = json.loads((out / WARM_START_RECORD).read_text())
    assert record["settings"]["min_start_success"] == 0.0 and len(record["rounds"]) == 1
    assert "check_success" not in record["rounds"][0]
    assert (out / "model.safetensors").stat().st_mtime_ns != trained_at
