"""The training entry point: ``accelerate launch -m agentgym.train --config examples/configs/<x>.yaml`` (or ``agentgym train``).

A config is YAML::

    trainer: tree_grpo          # or sao
    model: tiny                 # a model directory, or "tiny" for the locally built tiny model
    resume: true                # continue from the newest complete checkpoint in output_dir, if any
    output_dir: runs/keychain-tree
    max_steps: 100
    ...                         # any field of TreeGRPOConfig / SAOConfig (GRPOConfig, TrainingArguments)

``key=value`` arguments after the config override its fields (values parsed as YAML), e.g.
``max_steps=2 output_dir=/tmp/run``. The same command runs on one CPU process or, under
``accelerate launch`` with a config from ``examples/accelerate_configs/`` (or ``agentgym train
--launch ACCELERATE_CONFIG``, :func:`launch`, which checks the launch first), on several processes
or GPUs. Several CPU processes: ``agentgym train --launch examples/accelerate_configs/cpu_ddp.yaml
--config X.yaml use_cpu=true`` (torchrun + gloo; accelerate 1.16's ``--cpu --num_processes 2``
starts a single process unless MPI is set up). ``warm_start: true`` (or a mapping of
:data:`WARM_START_KEYS`) first fine-tunes ``model`` on the env's scripted demonstrations (KeyChain, Calculator) into ``output_dir/warm_start``,
checked on unseen train tasks when ``min_start_success`` is set, and trains from there; after a few logged steps without learning signal (every group's rewards
equal) the run says so and points to it. With a ``peft:`` section the run trains a LoRA adapter:
``output_dir`` then holds the adapter and ``output_dir/merged`` the policy with it folded in.

A checkpoint counts as complete when every process wrote its rollout state into it (the last
file written), so a run killed mid-save resumes from the one before. A resumed run must keep
the checkpoint's ``max_steps`` (its learning-rate schedule was built for it), and its
TensorBoard events go to ``output_dir/tensorboard`` like the first run's. With ``resume: true``, a
run whose ``output_dir`` holds a finished run of the same ``max_steps`` does nothing and says so.

A config that cannot run is one ``agentgym train:`` line on stderr and exit code 2 (a
:class:`ConfigError`): an unknown key (with the closest valid one), a missing or malformed
file, a model that is neither ``tiny`` nor a local model directory, a launcher that asked for
several processes but started one, several processes without ``use_cpu=true`` on a machine
without GPUs, or an ``output_dir`` another run is using. Every process of a launch meets the
same config; the first says it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import yaml

from agentgym.extras import requires

__all__ = [
    "TRAINERS",
    "ConfigError",
    "NO_SIGNAL_PATIENCE",
    "build_trainer",
    "has_learning_signal",
    "last_complete_checkpoint",
    "launch",
    "load_config",
    "main",
]

TRAINERS = {
    "tree_grpo": ("agentgym.trainers.tree_grpo:TreeGRPOTrainer", "agentgym.trainers.tree_grpo_config:TreeGRPOConfig"),
    "sao": ("agentgym.trainers.sao:SAOTrainer", "agentgym.trainers.sao_config:SAOConfig"),
}
#: Config keys read by this module rather than by the trainer's config class.
OWN_KEYS = ("trainer", "model", "resume", "warm_start")
#: ``warm_start:`` settings: :func:`agentgym.trainers.warm_start.scripted_warm_start`'s knobs.
WARM_START_KEYS = (
    "tasks",
    "epochs",
    "learning_rate",
    "mistake_rate",
    "min_start_success",
    "check_tasks",
    "max_rounds",
)
#: Logged steps in a row without learning signal before the run warns (once).
NO_SIGNAL_PATIENCE = 5
LOCK_FILE = ".agentgym-train.lock"
#: How long a launch's other processes wait, after a config error, for the launcher to end them once the first
#: process has said it (it ends them within its monitor interval, 0.1 s; the first may start seconds later).
SAY_ONCE_WAIT_S = 120


class ConfigError(ValueError):
    """A config (or launch) that cannot run; ``main`` prints it as one ``agentgym train:`` line and exits 2."""


def load_config(path: str | os.PathLike, overrides: Sequence[str] = ()) -> dict:
    """The YAML config with ``key=value`` overrides applied; a missing, malformed or non-mapping file is a :class:`ConfigError`."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"no config file at {path}" + (" (a directory)" if path.is_dir() else ""))
    data = _parse_yaml(path.read_text(), str(path))
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config is a YAML mapping of `key: value` lines, not a {type(data).__name__}")
    config = {str(key): _number(value) for key, value in data.items()}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} is not key=value")
        parsed = _number(_parse_yaml(value, f"override {key}="))
        # YAML 1.1 reads no/yes/on/off as booleans; save_strategy=no means the string
        config[key] = value if isinstance(parsed, bool) and value.lower() not in ("true", "false") else parsed
    return config


def _parse_yaml(text: str, where: str):
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where}: not valid YAML: {problem}{at}") from None


_EXPONENT_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _number(value):
    """``value``, or its float when it is a number YAML 1.1 leaves as a string (``1e-3``: no dot, so not a float)."""
    return float(value) if isinstance(value, str) and _EXPONENT_FLOAT.fullmatch(value) else value


def last_complete_checkpoint(output_dir: str | os.PathLike, world_size: int) -> str | None:
    """The newest ``checkpoint-N`` in ``output_dir`` holding the rollout state of all ``world_size`` processes."""
    from agentgym.trainers.base import STATE_FILE

    folder = Path(output_dir)
    if not folder.is_dir():
        return None
    steps = sorted(
        (int(m.group(1)), p)
        for p in folder.iterdir()
        if (m := re.fullmatch(r"checkpoint-(\d+)", p.name)) and p.is_dir()
    )
    for _, path in reversed(steps):
        if all((path / STATE_FILE.format(rank=r)).exists() for r in range(world_size)):
            return str(path)
    return None


def _load(target: str):
    from importlib import import_module

    module, _, name = target.partition(":")
    with requires("train"):
        return getattr(import_module(module), name)


def build_trainer(config: dict):
    """The trainer a config describes (model resolved, config class filled); a config that cannot run is a :class:`ConfigError`."""
    config = dict(config)
    kind = config.pop("trainer", None)
    if kind not in TRAINERS:
        raise ConfigError(
            f"the config's `trainer` must be one of {', '.join(sorted(TRAINERS))}"
            + ("; it sets none" if kind is None else f", got {kind!r}")
        )
    # The config class first: a config error is said before the trainer's modules (most of TRL's import) load.
    trainer_target, config_target = TRAINERS[kind]
    config_cls = _load(config_target)
    _check_keys(config, config_cls, kind)
    if not config.get("output_dir"):
        raise ConfigError("the config sets no output_dir (where checkpoints, logs and the model go)")
    model = _model_path(config.pop("model", "tiny"))
    config.pop("resume", None)
    warm_start = config.pop("warm_start", None)
    try:
        args = config_cls(**config)
    except (TypeError, ValueError) as exc:  # the config classes' own checks of values
        raise ConfigError(" ".join(str(exc).split())) from None
    if warm_start:
        model = str(_warm_start(model, warm_start, args))
    trainer_cls = _load(trainer_target)
    # TensorBoard's default folder is new per start (a date and host name); one fixed folder keeps
    # a resumed run's curves with the first run's. An explicit TENSORBOARD_LOGGING_DIR still wins.
    with _environment(
        TENSORBOARD_LOGGING_DIR=os.environ.get("TENSORBOARD_LOGGING_DIR") or str(Path(args.output_dir) / "tensorboard")
    ):
        trainer = trainer_cls(model, args)
    trainer.add_callback(_learning_signal_callback())
    trainer.add_callback(_interrupt_callback())
    return trainer


def _check_keys(config: dict, config_cls, kind: str) -> None:
    valid = {f.name for f in dataclasses.fields(config_cls) if f.init} | set(OWN_KEYS)
    for key in config:
        if key not in valid:
            raise ConfigError(
                f"unknown config key {key!r} for trainer {kind}"
                + _closest(key, valid, f" (see {TRAINERS[kind][1].replace(':', '.')})")
            )


def _closest(key: str, valid, otherwise: str) -> str:
    """ "; did you mean 'x'?" for the valid key nearest to a typo, else ``otherwise``."""
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else otherwise


def _model_path(model) -> str:
    """``tiny`` or ``tiny-vlm`` (built locally; tiny-vlm for screenshot envs) or a local model directory."""
    from agentgym.models import resolve_model

    try:
        return resolve_model(str(model))
    except ValueError as exc:
        raise ConfigError(f"model {exc}") from None


def _warm_start(base: str, settings, args) -> Path:
    """``base`` fine-tuned on scripted demonstrations (KeyChain's), built once into ``output_dir/warm_start``."""
    if settings is True:
        settings = {}
    if not isinstance(settings, dict):
        raise ConfigError(f"warm_start is true or a mapping of {', '.join(WARM_START_KEYS)}, got {settings!r}")
    for key in settings:
        if key not in WARM_START_KEYS:
            raise ConfigError(
                f"unknown warm_start key {key!r}"
                + _closest(key, WARM_START_KEYS, f" (one of {', '.join(WARM_START_KEYS)})")
            )
    from agentgym.trainers.warm_start import WarmStartFailed, scripted_warm_start

    config = {
        "env_id": args.env_id,
        "env_kwargs": args.env_kwargs,
        "max_turns": args.max_turns,
        "max_turn_tokens": args.max_turn_tokens,
        "system_prompt": args.system_prompt,
        "temperature": args.temperature,  # the start's self-check samples as the rollouts will
    }
    with args.main_process_first(desc="the SFT warm start"):  # one process builds it, the others load it
        try:
            return scripted_warm_start(
                Path(args.output_dir) / "warm_start", config, seed=args.seed, base=base, **settings
            )
        except (WarmStartFailed, ValueError) as exc:
            raise ConfigError(f"warm_start: {exc}") from None


@contextlib.contextmanager
def _environment(**values: str):
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def has_learning_signal(logs: dict) -> bool | None:
    """Whether one logged step could teach the policy anything; ``None`` for a log without rollout metrics.

    Tree GRPO logs the share of groups whose outcomes were all equal (``groups/zero_variance_frac``):
    at 1 every advantage is 0. SAO's baseline is learned, so there only episodes that never
    succeed and never earn reward mean nothing to learn.
    """
    if "groups/zero_variance_frac" in logs:
        return logs["groups/zero_variance_frac"] < 1.0
    if "rollout/success_rate" in logs:
        return bool(logs["rollout/success_rate"] > 0 or logs.get("rollout/reward", 0.0) != 0)
    return None


# Set by the CLI's Ctrl-C handler (:func:`_interrupts_kept`); the run raises it again at the next step boundary.
_interrupted = threading.Event()


@contextlib.contextmanager
def _interrupts_kept():
    """While training from the CLI, a Ctrl-C always ends the run.

    Python raises KeyboardInterrupt wherever the main thread happens to be, and some places drop it: a
    ``__del__`` or weakref callback that the garbage collector runs then ("Exception ignored in"), or
    ``asyncio.run``, which under Python's own handler turns the first Ctrl-C into a cancellation of its task
    that code handling ``CancelledError`` may absorb. One lost interrupt let a run train on to its end
    (the ctrl-c test, once in a fresh-clone rehearsal). This handler records the interrupt before raising it
    (and, not being Python's default handler, asyncio leaves it in place), and :func:`_interrupt_callback`
    raises it again at the next step boundary if it was lost.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        _interrupted.set()
        signal.default_int_handler(signum, frame)

    def unraisable(report):
        if not isinstance(report.exc_value, KeyboardInterrupt):  # one dropped by a finalizer is raised again
            unraisable_before(report)

    _interrupted.clear()
    previous, unraisable_before = signal.signal(signal.SIGINT, handler), sys.unraisablehook
    sys.unraisablehook = unraisable
    try:
        yield
        if _interrupted.is_set():  # lost during the last step: the run ended, but it was interrupted
            raise KeyboardInterrupt
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = unraisable_before


def _interrupt_callback():
    from transformers import TrainerCallback

    class InterruptKept(TrainerCallback):
        """Raises a Ctrl-C the run lost (see :func:`_interrupts_kept`) at the next step boundary."""

        def on_step_begin(self, args, state, control, **kwargs):
            if _interrupted.is_set():
                raise KeyboardInterrupt

        on_step_end = on_substep_end = on_step_begin

    return InterruptKept()


def _learning_signal_callback():
    from transformers import TrainerCallback

    class LearningSignal(TrainerCallback):
        """Warns once, on the main process, after :data:`NO_SIGNAL_PATIENCE` logged steps in a row without learning signal."""

        def __init__(self):
            self.quiet_steps, self.warned = 0, False

        def on_log(self, args, state, control, logs=None, **kwargs):
            signal = has_learning_signal(logs or {})
            if signal is None:
                return
            self.quiet_steps = 0 if signal else self.quiet_steps + 1
            if self.quiet_steps >= NO_SIGNAL_PATIENCE and not self.warned and state.is_world_process_zero:
                self.warned = True
                print(
                    f"agentgym train: warning: no learning signal in {self.quiet_steps} steps in a row (every "
                    "group's episodes got the same reward, so every advantage is 0; loss stays 0). A model that "
                    "never succeeds, such as the random `tiny` one, gives RL nothing to learn from: start from a "
                    "warm start (`model:` an SFT checkpoint; for KeyChain, `warm_start: true` in the config or "
                    "as an override builds one), or make the tasks easier.",
                    file=sys.stderr,
                    flush=True,
                )

    return LearningSignal()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentgym train", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="a YAML config (see examples/configs/)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of config fields")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    config: dict = {}
    try:
        config = load_config(args.config, args.overrides)
        return _run(config, args)
    except ConfigError as exc:
        # Every process of a launch meets the same config: the first one says it, once. The others wait
        # for the launcher to end them: a process that left first would have it end the first one,
        # perhaps before that one said anything.
        if not _is_first_process():
            try:
                time.sleep(SAY_ONCE_WAIT_S)
            except KeyboardInterrupt:  # the launch was interrupted: the first process says so
                return 130
        print(f"agentgym train: {exc}", file=sys.stderr)  # (a launch whose first process did not say it: this one)
        return 2
    except KeyboardInterrupt:
        if _is_first_process():
            print(
                f"agentgym train: interrupted; the complete checkpoints in {config.get('output_dir')} are kept "
                "(rerun the same command to resume from the newest)",
                file=sys.stderr,
            )
        # Rollout threads may still be in torch's native code; a normal interpreter shutdown under them
        # aborts ("terminate called without an active exception", SIGABRT). Checkpoints are whole files
        # already and sandboxes carry owner labels for `agentgym sandbox gc`, so leave at once.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)


def launch(accelerate_config: str, argv: list[str]) -> int:
    """``agentgym train --launch ACCELERATE_CONFIG --config X.yaml [key=value ...]``: ``accelerate launch`` of this
    module with that accelerate config, checked first, so that a launch this machine cannot run is one line
    before any process starts (a GPU config without GPUs) and a config error its processes meet is one line too.

    Under a plain ``accelerate launch``, the launcher reports every failed process after agentgym's line.
    """
    args = _parser().parse_args(argv)
    try:
        config = load_config(args.config, args.overrides)
        processes, cpu = _accelerate_processes(accelerate_config)
        if not cpu:
            _check_devices(processes, config, args, launch=accelerate_config)
    except ConfigError as exc:
        print(f"agentgym train: {exc}", file=sys.stderr)
        return 2
    from accelerate.commands.launch import launch_command, launch_command_parser
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    command = ["--config_file", accelerate_config, "-m", "agentgym.train", "--config", args.config, *args.overrides]
    # torchrun's agent logs each process it ends and each failure; the failure is said below, in one line.
    elastic = logging.getLogger("torch.distributed.elastic")
    level = elastic.level
    elastic.setLevel(logging.CRITICAL)
    try:
        # In this process, so that a failed launch is one line here instead of the launcher's traceback.
        launch_command(launch_command_parser().parse_args(command))
    except subprocess.CalledProcessError as exc:  # accelerate's one-process launch; its output went through already
        return exc.returncode
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()  # the others were ended by the launcher after it
        if failure.exitcode == 2:  # a ConfigError, which the process said in one line
            return 2
        print(
            f"agentgym train: process {rank} of {processes} failed (exit code {failure.exitcode}); "
            "its output is above, and the launcher ended the others",
            file=sys.stderr,
        )
        return 1
    finally:
        elastic.setLevel(level)
    return 0


def _accelerate_processes(path: str) -> tuple[int, bool]:
    """(processes, whether on CPU) of an accelerate config file; one that accelerate cannot read is a ConfigError."""
    from accelerate.commands.config.config_args import load_config_from_file

    if not Path(path).is_file():
        raise ConfigError(f"no accelerate config at {path} (examples/accelerate_configs/ has one per setup)")
    try:
        cluster = load_config_from_file(path)
    except Exception as exc:  # accelerate's own reading: YAML errors, unknown fields
        raise ConfigError(f"{path}: not an accelerate config: {' '.join(str(exc).split())}") from None
    return int(getattr(cluster, "num_processes", 1) or 1), bool(getattr(cluster, "use_cpu", False))


def _is_first_process() -> bool:
    """Whether this is the launch's first process (or the only one), before any process group exists."""
    return int(os.environ.get("RANK", "0")) == 0


def _run(config: dict, args: argparse.Namespace) -> int:
    _check_launch()
    _check_devices(int(os.environ.get("WORLD_SIZE", "1")), config, args)
    resume = config.get("resume", True)
    if resume is True and (done := _finished_run(config)):
        if _is_first_process():
            print(
                f"agentgym train: {config['output_dir']} holds a finished run ({done}); nothing to do "
                "(another output_dir trains anew)"
            )
        return 0
    trainer = build_trainer(config)
    output_dir = trainer.args.output_dir
    _check_world_size(trainer.accelerator.num_processes)
    lock = _claim_output_dir(output_dir) if trainer.accelerator.is_main_process else None
    checkpoint = None
    if resume is True:
        checkpoint = last_complete_checkpoint(output_dir, trainer.accelerator.num_processes)
    elif resume:
        checkpoint = str(resume)
        if not Path(checkpoint).is_dir():
            raise ConfigError(f"resume: no checkpoint directory at {checkpoint}")
    if checkpoint:
        _check_resumable(checkpoint, trainer.args.max_steps)
    try:
        with _interrupts_kept():
            result = trainer.train(resume_from_checkpoint=checkpoint)
        trainer.save_model(output_dir)
        trainer.save_state()  # trainer_state.json (the log history) next to the model
        merged = _save_merged(trainer, Path(output_dir) / "merged") if trainer.accelerator.is_main_process else None
    finally:
        if lock is not None:
            lock.close()
    if trainer.accelerator.is_main_process:
        start = f"resumed from {checkpoint}" if checkpoint else "started from scratch"
        where = f"adapter in {output_dir}, merged model in {merged}" if merged else f"model in {output_dir}"
        print(
            f"agentgym train: {trainer.state.global_step} steps on {trainer.accelerator.num_processes} process(es), "
            f"loss {result.training_loss:.4f}, {start}; {where}"
        )
    return 0


def _save_merged(trainer, directory: Path) -> Path | None:
    """With a LoRA adapter, the trained policy as a plain model too (what ``agentgym serve`` and eval load); else None."""
    from agentgym.trainers.lora import is_adapted
    from agentgym.trainers.rollouts import policy_copy

    model = trainer.accelerator.unwrap_model(trainer.model)
    if not is_adapted(model):
        return None
    merged = cast(Any, policy_copy(model))
    if hasattr(merged, "value_model"):  # SAO's critic is not part of the policy
        del merged.value_model
    merged.save_pretrained(directory)
    trainer.processing_class.save_pretrained(directory)
    return directory


# The documented CPU launch (examples/accelerate_configs/cpu_ddp.yaml says why it is torchrun under MULTI_GPU).
_MULTI_CPU = (
    "accelerate launch --config_file examples/accelerate_configs/cpu_ddp.yaml [--num_processes N] "
    "-m agentgym.train --config X.yaml use_cpu=true"
)


def _check_launch() -> None:
    """Refuse a launch that asked for several processes and got one (before any model is loaded)."""
    # accelerate's single-process launcher sets ACCELERATE_USE_CPU always and MASTER_ADDR only when
    # asked for more than one process; torchrun, which starts several, sets WORLD_SIZE.
    if "ACCELERATE_USE_CPU" in os.environ and "MASTER_ADDR" in os.environ and "WORLD_SIZE" not in os.environ:
        raise ConfigError(
            "accelerate launch was asked for several processes but started one (with --cpu it runs "
            f"a single process unless MPI is set up); for N CPU processes run: {_MULTI_CPU}"
        )


def _check_devices(processes: int, config: dict, args: argparse.Namespace, launch: str | None = None) -> None:
    """Refuse a launch of several processes for accelerators on a machine that has none (before any model is loaded).

    Each such process would find no device, train alone and be refused by :func:`_check_world_size`
    only after building its trainer: eight model loads to say it eight times. ``use_cpu=true`` (or
    accelerate's ``--cpu``) asks for CPU processes, which join over gloo. ``launch`` is the accelerate
    config of ``agentgym train --launch``, whose advice is in that form.
    """
    on_cpu = os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes", "y", "on", "t")  # str_to_bool
    if processes <= 1 or config.get("use_cpu") is True or on_cpu:
        return
    import torch

    if torch.accelerator.device_count() > 0:
        return
    rest = " ".join(
        ["--config", args.config, *(o for o in args.overrides if not o.startswith("use_cpu=")), "use_cpu=true"]
    )
    cpu_config = "examples/accelerate_configs/cpu_ddp.yaml"
    advice = (
        f"agentgym train --launch {cpu_config} {rest}"
        if launch
        else f"accelerate launch --config_file {cpu_config} -m agentgym.train {rest}"
    )
    asked = f"{launch} starts {processes} processes" if launch else f"the launcher started {processes} processes"
    raise ConfigError(
        f"{asked} without use_cpu=true, so each looks for a GPU, and this machine has none; for CPU processes "
        f"run: {advice}"
    )


def _check_world_size(num_processes: int) -> None:
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched != num_processes:
        raise ConfigError(
            f"the launcher started {launched} processes but they did not join one run (world size "
            f"{num_processes}): each would train alone into the same output_dir. Without GPUs, run "
            f"{_MULTI_CPU} (use_cpu=true makes the processes join over gloo)"
        )


def _claim_output_dir(output_dir: str):
    """An open lock file that keeps other training runs out of ``output_dir`` until it is closed (or the process dies)."""
    import fcntl

    Path(output_dir).mkdir(parents=True, exist_ok=True)
    lock = open(Path(output_dir) / LOCK_FILE, "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "another process"
        lock.close()
        raise ConfigError(
            f"{output_dir} is in use by another training run ({holder}); give this run its own output_dir=..."
        ) from None
    lock.truncate(0)
    lock.write(f"pid {os.getpid()}\n")
    lock.flush()
    return lock


def _finished_run(config: dict) -> str | None:
    """What the run in the config's ``output_dir`` finished (``"2 of max_steps=2 steps"``), if it reached this config's ``max_steps``.

    The final ``trainer_state.json`` is written after training ends, so it marks a finished run
    (checkpoints or not); resuming from its last checkpoint would train a step past max_steps.
    """
    max_steps, output_dir = config.get("max_steps"), config.get("output_dir")
    state = Path(str(output_dir)) / "trainer_state.json"
    if not isinstance(max_steps, int) or max_steps <= 0 or not output_dir or not state.is_file():
        return None
    try:
        recorded = json.loads(state.read_text())
    except (OSError, json.JSONDecodeError):
        return None  # not a state this module wrote: let the run proceed and the trainer judge it
    step = recorded.get("global_step")
    if recorded.get("max_steps") != max_steps or not isinstance(step, int) or step < max_steps:
        return None
    return f"{step} of max_steps={max_steps} steps"


def _check_resumable(checkpoint: str, max_steps: int) -> None:
    """A resumed run continues its checkpoint's learning-rate schedule, so it must keep that run's ``max_steps``."""
    state = Path(checkpoint) / "trainer_state.json"
    if not state.is_file():
        return
    planned = json.loads(state.read_text()).get("max_steps")
    if planned is not None and planned != max_steps:
        raise ConfigError(
            f"{checkpoint} belongs to a run of max_steps={planned}, and resuming continues that run's "
            f"learning-rate schedule, so max_steps={max_steps} would not take effect: keep "
            f"max_steps={planned}, or start a new run (another output_dir, or resume=false)"
        )


if __name__ == "__main__":
    sys.exit(main())
