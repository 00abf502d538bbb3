"""Both trainers with two CPU processes for two steps on the tiny model (through `agentgym train --launch` and a plain `accelerate launch`), SAO resuming after SIGKILL without losing a stored trajectory (and a rerun of the finished run doing nothing), and the warm start and no-signal warning of `agentgym.train`.

In accelerate 1.16, ``accelerate launch --cpu --num_processes 2`` starts a *single* process
(multi-process CPU goes through mpirun and a hostfile). Two CPU processes come from torchrun,
which ``examples/accelerate_configs/cpu_ddp.yaml`` selects (the README's command), with the
trainer's ``use_cpu=true`` making each process join a gloo process group
(DistributedType.MULTI_CPU); the test checks that both ranks really ran.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentgym.models import tiny_model_path
from agentgym.rollout.store import TrajectoryStore
from tests.helpers.serving import LoggedProcess

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "examples" / "configs"
# Small enough for two contended CPU cores: short episodes, few tasks, tiny batches.
SMALL = ["max_turns=2", "max_turn_tokens=16", "env_kwargs={num_tasks: 8}", "per_device_train_batch_size=2"]
PER_TRAINER = {
    "keychain-tree_grpo.yaml": ["num_generations=2", "tree_max_leaves=4", "rollout_concurrency=4"],
    "keychain-sao.yaml": ["rollout_concurrency=2", "producer_queue_size=4"],
}


@pytest.fixture(scope="module", autouse=True)
def tiny_model():
    return tiny_model_path()  # built once here, not by two processes racing


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "CUDA_VISIBLE_DEVICES": ""}


@pytest.mark.slow
@pytest.mark.parametrize("config", sorted(PER_TRAINER))
def test_accelerate_launch_two_cpu_processes(tmp_path, config):
    out = tmp_path / "run"
    cpu_ddp = str(ROOT / "examples" / "accelerate_configs" / "cpu_ddp.yaml")
    # The README's command (agentgym train --launch) for SAO, the plain accelerate launch it runs for tree GRPO:
    # examples/accelerate_configs/cpu_ddp.yaml, the trainer's use_cpu=true.
    if config == "keychain-sao.yaml":
        launch = [str(Path(sys.executable).with_name("agentgym")), "train", "--launch", cpu_ddp]
    else:
        launch = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", cpu_ddp, "-m", "agentgym.train"]
    command = [
        *launch,
        "--config",
        str(CONFIGS / config),
        "max_steps=2",
        f"output_dir={out}",
        "save_strategy=no",
        "use_cpu=true",
        *SMALL,
        *PER_TRAINER[config],
    ]
    done = subprocess.run(command, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    assert "agentgym train: 2 steps on 2 process(es)" in done.stdout
    # one trajectory store per process, metrics through TensorBoard
    assert (
        TrajectoryStore(out / "trajectories.jsonl").read() and TrajectoryStore(out / "trajectories-rank1.jsonl").read()
    )
    events = list(out.rglob("events.out.tfevents.*"))
    assert events and {p.parent for p in events} == {out / "tensorboard"}  # one folder, which a resume reuses
    assert (out / "model.safetensors").exists()


@pytest.mark.slow
def test_a_model_without_reward_is_told_about_the_warm_start_which_the_config_builds(tmp_path):
    base = [
        sys.executable,
        "-m",
        "agentgym.train",
        "--config",
        str(CONFIGS / "keychain-tree_grpo.yaml"),
        "save_strategy=no",
        "report_to=none",
        *SMALL,
        *PER_TRAINER["keychain-tree_grpo.yaml"],
    ]
    # The random tiny model never succeeds: every group's rewards are equal, nothing to learn.
    done = subprocess.run(
        [*base, "max_steps=5", f"output_dir={tmp_path / 'tiny'}"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no learning signal in 5 steps in a row" in done.stderr and "warm_start: true" in done.stderr
    assert "started from scratch" in done.stdout

    out = tmp_path / "warm"
    done = subprocess.run(
        [*base, "warm_start={tasks: 16, epochs: 1, mistake_rate: 0.5}", "max_steps=1", f"output_dir={out}"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "warm_start" / "model.safetensors").exists() and "1 steps on 1 process(es)" in done.stdout


def _state(checkpoint: Path) -> dict:
    return json.loads((checkpoint / "agentgym_state-rank0.json").read_text())


@pytest.mark.slow
def test_sao_resumes_after_sigkill_without_losing_trajectories(tmp_path):
    out = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "agentgym.train",
        "--config",
        str(CONFIGS / "keychain-sao.yaml"),
        "max_steps=4",
        "save_steps=1",
        f"output_dir={out}",
        "report_to=none",
        "log_kl_to_start=false",
        *SMALL,
        *PER_TRAINER["keychain-sao.yaml"],
    ]
    process = LoggedProcess(command, cwd=ROOT, env=_env())
    deadline = time.monotonic() + 600
    try:
        while not (out / "checkpoint-2" / "agentgym_state-rank0.json").exists():
            assert process.poll() is None, process.output()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint-2 within 10 minutes"
            time.sleep(0.2)
    finally:
        process.stop(grace=0, signal_number=signal.SIGKILL)
    store = out / "trajectories.jsonl"
    with pytest.warns(RuntimeWarning) if not store.read_bytes().endswith(b"\n") else _nothing():
        before = TrajectoryStore(store).read()
    resumed_from = max(
        (p for p in out.glob("checkpoint-*") if (p / "agentgym_state-rank0.json").exists()),
        key=lambda p: int(p.name.split("-")[1]),
    )
    unconsumed = len(before) - _state(resumed_from)["store_position"]

    done = subprocess.run(command, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    assert f"resumed from {resumed_from}" in done.stdout
    assert "missing keys" not in done.stderr  # the tied lm_head.weight is loaded through the embeddings
    after = TrajectoryStore(store).read()
    assert [r.id for r in after[: len(before)]] == [r.id for r in before]  # nothing stored was lost or rewritten
    final = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert final["global_step"] == 4
    # the records produced but not trained before the kill were queued first after the resume
    assert [h["resumed_records"] for h in final["log_history"] if "resumed_records" in h] == [float(unconsumed)]
    assert _state(out / "checkpoint-4")["store_position"] <= len(after)

    # Rerunning the finished run does nothing, and says so (resuming checkpoint-4 would train a fifth step).
    again = subprocess.run(command, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"agentgym train: {out} holds a finished run (4 of max_steps=4 steps); nothing to do" in again.stdout
    assert sorted(p.name for p in out.glob("checkpoint-*")) == [f"checkpoint-{n}" for n in range(1, 5)]
    assert [r.id for r in TrajectoryStore(store).read()] == [r.id for r in after]


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.slow
def test_ctrl_c_in_train_is_one_line_and_keeps_the_checkpoints(tmp_path):
    out = tmp_path / "run"
    command = [
        str(Path(sys.executable).with_name("agentgym")),
        "train",
        "--config",
        str(CONFIGS / "keychain-tree_grpo.yaml"),
    ]
    command += ["max_steps=50", "save_steps=1", f"output_dir={out}", "report_to=none", *SMALL]
    process = LoggedProcess([*command, *PER_TRAINER["keychain-tree_grpo.yaml"]], cwd=ROOT, env=_env())
    deadline = time.monotonic() + 600
    try:
        while not (out / "checkpoint-1" / "agentgym_state-rank0.json").exists():
            assert process.poll() is None, process.output()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint-1 within 10 minutes"
            time.sleep(0.2)
    finally:
        output = process.stop(grace=60, signal_number=signal.SIGINT)
    assert process.returncode == 130, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    said = (
        f"agentgym train: interrupted; the complete checkpoints in {out} are kept "
        "(rerun the same command to resume from the newest)\n"
    )
    assert output.count("agentgym train:") == 1 and said in output, output[-3000:]  # the progress bar may follow it
