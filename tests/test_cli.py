"""The `agentgym` command line, run as a user runs it (a subprocess of the installed entry point): listings, and every usage error as one line with exit code 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

AGENTGYM = [str(Path(sys.executable).with_name("agentgym"))]
ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "examples" / "configs" / "keychain-tree_grpo.yaml")


def run(*args):
    return subprocess.run([*AGENTGYM, *args], capture_output=True, text=True, timeout=300)


def test_envs_list_names_every_builtin():
    result = run("envs", "list")
    assert result.returncode == 0, result.stderr
    assert "agentgym/code.humaneval-v0" in result.stdout and "agentgym/code.repofix-v0" in result.stdout


def test_envs_list_filters_and_aligns_ids_task_counts_and_descriptions():
    listed = run("envs", "list", "bfcl")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].split() == ["id", "description"]
    result = run("envs", "list", "bfcl", "--tasks")  # builds each listed env to count its tasks
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["id", "tasks", "description"] and len(rows) == 4
    assert [row.split(None, 2)[2] for row in rows] == [row.split(None, 1)[1] for row in listed.stdout.splitlines()[1:]]
    assert all(row.startswith("agentgym/tool.bfcl-multi-turn-") for row in rows)
    assert len({row.index(" 200  ") for row in rows}) == 1  # one column for the counts
    assert "category=miss_func" in result.stdout
    web = [row.split()[0] for row in run("envs", "list", "agentgym/web.*").stdout.splitlines()[1:]]
    apps = [env_id for env_id in web if not env_id.startswith("agentgym/web.miniwob.")]
    assert apps == ["agentgym/web.mail-v0", "agentgym/web.shop-v0", "agentgym/web.wiki-v0"]


def test_tasks_lists_ids_categories_and_whether_a_reference_solution_exists():
    result = run("tasks", "code.humaneval-v0")
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["id", "category", "solution"] and len(rows) == 164
    assert rows[0].split() == ["HumanEval/0", "humaneval", "yes"]
    assert len({row.index(" humaneval ") for row in rows}) == 1  # aligned columns
    assert run("tasks", "web.miniwob.click-test-v0").stdout.splitlines()[1].split() == [
        "click-test",
        "click-test",
        "no",
    ]


def test_tasks_filters_by_a_word_or_a_glob():
    assert [
        row.split()[0] for row in run("tasks", "agentgym/code.humaneval-v0", "HumanEval/16?").stdout.splitlines()[1:]
    ] == [f"HumanEval/16{n}" for n in range(4)]
    rows = run("tasks", "web.shop-v0", "cheapest").stdout.splitlines()[1:]
    assert rows and all("cheapest" in row.split()[0] for row in rows)


def test_tasks_of_an_env_defined_in_a_local_file(tmp_path):
    # The README's GuessEnv saved as guess_env.py: gymnasium's module:id form imports it from the working directory.
    from tests.test_docs import example

    (tmp_path / "guess_env.py").write_text(example("README.md", "Writing an environment"))
    result = subprocess.run(
        [*AGENTGYM, "tasks", "guess_env:Guess-v0", "4?"], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert [row.split()[0] for row in result.stdout.splitlines()[1:]] == [str(n) for n in range(40, 50)]
    missing = subprocess.run(
        [*AGENTGYM, "tasks", "no_such_module:Guess-v0"], capture_output=True, text=True, cwd=tmp_path
    )
    _one_line_usage_error(missing, "tasks", "no_such_module")


def test_tasks_errors_are_one_line():
    _one_line_usage_error(run("tasks", "nope-v0"), "tasks", "nope", "agentgym envs list")
    _one_line_usage_error(run("tasks", "tool.keychain-v0", "zzz"), "tasks", "no task", "'zzz'")


def test_eval_help_names_every_builtin_suite():
    from agentgym.eval.suites import BUILTIN_SUITES

    text = " ".join(run("eval", "--help").stdout.split())
    assert all(name in text for name in BUILTIN_SUITES)


def _one_line_usage_error(result, command: str, *fragments: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"agentgym {command}: "), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_train_config_errors_are_one_line(tmp_path):
    _one_line_usage_error(
        run("train", "--config", str(tmp_path / "missing.yaml")), "train", "no config file at", "missing.yaml"
    )
    broken = tmp_path / "broken.yaml"
    broken.write_text("trainer: sao\nenv_kwargs: {num_tasks: 4\nmax_steps: 3\n")
    _one_line_usage_error(run("train", "--config", str(broken)), "train", "broken.yaml", "not valid YAML", "line 3")
    listed = tmp_path / "list.yaml"
    listed.write_text("- trainer: sao\n")
    _one_line_usage_error(run("train", "--config", str(listed)), "train", "a config is a YAML mapping")
    _one_line_usage_error(run("train", "--config", CONFIG, "max_steps"), "train", "'max_steps' is not key=value")


def test_train_unknown_key_names_the_closest_valid_one(tmp_path):
    _one_line_usage_error(
        run("train", "--config", CONFIG, "max_stepz=3", f"output_dir={tmp_path}"),
        "train",
        "unknown config key 'max_stepz'",
        "did you mean 'max_steps'?",
    )


def test_train_rerun_of_a_finished_run_does_nothing_and_says_so(tmp_path):
    # What a finished run leaves: the final trainer_state.json (tests/trainers/test_launch.py makes a real one).
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 2, "max_steps": 2}))
    result = run("train", "--config", CONFIG, "max_steps=2", f"output_dir={tmp_path}")
    assert result.returncode == 0, result.stderr
    assert (
        result.stdout == f"agentgym train: {tmp_path} holds a finished run (2 of max_steps=2 steps); nothing to do "
        "(another output_dir trains anew)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trainer_state.json"]

    # The same through a launch of two processes (the README's CPU command): said once, and the launch succeeds.
    launched = subprocess.run(
        [*AGENTGYM, "train", "--launch", str(ROOT / "examples" / "accelerate_configs" / "cpu_ddp.yaml")]
        + ["--config", CONFIG, "max_steps=2", f"output_dir={tmp_path}", "use_cpu=true"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (launched.returncode, launched.stdout) == (0, result.stdout), launched.stderr[-3000:]


def test_train_model_must_be_a_local_directory(tmp_path):
    _one_line_usage_error(
        run("train", "--config", CONFIG, "model=Qwen/Qwen2.5-0.5B", f"output_dir={tmp_path}"),
        "train",
        "model 'Qwen/Qwen2.5-0.5B' is not a directory",
        "nothing is downloaded",
    )


def test_train_refuses_a_launcher_that_asked_for_processes_it_did_not_start(tmp_path):
    # What `accelerate launch --cpu --num_processes 2` leaves in the environment of its one process.
    env = {**os.environ, "ACCELERATE_USE_CPU": "True", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    env.pop("WORLD_SIZE", None)
    result = subprocess.run(
        [*AGENTGYM, "train", "--config", CONFIG, f"output_dir={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    _one_line_usage_error(
        result, "train", "asked for several processes but started one", "cpu_ddp.yaml", "use_cpu=true"
    )


ACCELERATE_CONFIGS = ROOT / "examples" / "accelerate_configs"


def _cpu_only():
    """This machine's environment with any GPU hidden: the launches below are the ones a CPU machine gets.

    ``make test`` runs under scripts/netns, whose namespace has no resolvable hostname: torch's c10d then
    warns once per launched process ("The hostname of the client socket cannot be retrieved"), a line of
    the test machine's, not of agentgym's or the launcher's; its C++ log is kept to errors here."""
    return {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "TORCH_CPP_LOG_LEVEL": "ERROR"}


def test_a_gpu_launch_on_a_cpu_machine_is_one_line_naming_the_cpu_config(tmp_path):
    # The README's GPU command: said before any process starts, in the form to run instead.
    config = ["--config", CONFIG, f"output_dir={tmp_path}"]
    result = subprocess.run(
        [*AGENTGYM, "train", "--launch", str(ACCELERATE_CONFIGS / "ddp.yaml"), *config],
        capture_output=True,
        text=True,
        timeout=300,
        env=_cpu_only(),
    )
    _one_line_usage_error(result, "train", "ddp.yaml starts 8 processes without use_cpu=true", "has none")
    assert result.stderr.rstrip().endswith(
        f"run: agentgym train --launch examples/accelerate_configs/cpu_ddp.yaml --config {CONFIG} "
        f"output_dir={tmp_path} use_cpu=true"
    )

    # The same under a plain `accelerate launch`: each process stops before loading a model, and only the first
    # says why (the launcher's own report of the failed processes follows it).
    launched = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ACCELERATE_CONFIGS / "ddp.yaml")]
        + ["--num_processes", "4", "-m", "agentgym.train", *config],
        capture_output=True,
        text=True,
        timeout=300,
        env=_cpu_only(),
    )
    assert launched.returncode != 0
    said = [line for line in launched.stderr.splitlines() if line.startswith("agentgym train:")]
    assert len(said) == 1 and "accelerate launch --config_file examples/accelerate_configs/cpu_ddp.yaml" in said[0]
    assert "the launcher started 4 processes without use_cpu=true" in said[0], launched.stderr[-3000:]


def test_a_config_error_in_a_launch_is_said_once_without_the_launchers_report(tmp_path):
    # Found by the launched processes (not before the launch): the first says it, the launcher ends the others.
    config = tmp_path / "bad.yaml"
    config.write_text(f"trainer: sgd\noutput_dir: {tmp_path}\nuse_cpu: true\n")
    result = subprocess.run(
        [*AGENTGYM, "train", "--launch", str(ACCELERATE_CONFIGS / "cpu_ddp.yaml"), "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
        env=_cpu_only(),
    )
    _one_line_usage_error(result, "train", "the config's `trainer` must be one of sao, tree_grpo, got 'sgd'")
    assert "FAILED" not in result.stderr and "exitcode" not in result.stderr  # no torchrun report


def _run_dir(path: Path, task_ids: list[str]) -> Path:
    from agentgym.eval.metrics import summarize, summarize_by

    rows = [
        {
            "suite": "s",
            "task_id": t,
            "category": "c",
            "sample": 0,
            "success": True,
            "reward": 1.0,
            "turns": 1,
            "tokens_in": 1,
            "tokens_out": 1,
            "wall_s": 0.1,
            "error": None,
            "trajectory": None,
        }
        for t in task_ids
    ]
    path.mkdir()
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "summary.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "suite": "s",
                "model": "m",
                "k": 1,
                "tasks": len(rows),
                "episodes": len(rows),
                "metrics": summarize(rows, 1),
                "by_category": summarize_by(rows, "category", 1),
            }
        )
    )
    return path


def test_eval_compare_refuses_what_is_not_a_run_and_runs_without_shared_tasks(tmp_path):
    a = _run_dir(tmp_path / "a", ["t1", "t2"])
    (tmp_path / "empty").mkdir()
    result = run("eval", "compare", str(a), str(tmp_path / "empty"))
    _one_line_usage_error(result, "eval compare", "not an eval run", "give the --out directory")
    assert result.stdout == ""  # nothing printed before the error
    _one_line_usage_error(
        run("eval", "compare", str(a), str(tmp_path / "nowhere")), "eval compare", "no such directory"
    )
    b = _run_dir(tmp_path / "b", ["t3"])
    _one_line_usage_error(
        run("eval", "compare", str(a), str(b)), "eval compare", "share no task", "2 tasks only in A, 1 only in B"
    )


def test_eval_suite_file_errors_name_the_file(tmp_path):
    suite = tmp_path / "mine.jsonl"
    suite.write_text('{"env": "tool.keychain-v0", "task_id": "train-0"}\n{"env": "tool.keychain-v0", "task_id": \n')
    _one_line_usage_error(
        run("eval", "--suite", str(suite), "--policy", "oracle"), "eval", f"{suite}:2:", "not a JSON object"
    )
    suite.write_text('{"env": "NoSuch-v0", "task_id": "x"}\n')
    _one_line_usage_error(
        run("eval", "--suite", str(suite), "--policy", "oracle"),
        "eval",
        "'agentgym/NoSuch-v0', which is not registered",
    )
    _one_line_usage_error(
        run("eval", "--suite", "humaneval", "--policy", str(tmp_path)), "eval", "is a directory without config.json"
    )


def test_other_subcommands_report_usage_errors_in_one_line(tmp_path):
    _one_line_usage_error(
        run("serve", "--model", str(tmp_path / "nope"), "--port", "1"), "serve", "--model", "is not a directory"
    )
    _one_line_usage_error(
        run("images", "build", "--dockerfile", str(tmp_path / "Dockerfile")), "images build", "no such file"
    )
    _one_line_usage_error(run("envs", "list", "no-such-env"), "envs list", "no registered env id matches")
    _one_line_usage_error(
        run("memory", "import", str(tmp_path / "m.db"), str(tmp_path / "none.jsonl")), "memory import", "none.jsonl"
    )


def test_a_reader_that_left_ends_the_command_quietly():
    read, write = os.pipe()
    os.close(read)  # like `agentgym envs list | head -0`: every write hits a closed pipe
    try:
        result = subprocess.run(
            [*AGENTGYM, "envs", "list"], stdout=write, stderr=subprocess.PIPE, text=True, timeout=300
        )
    finally:
        os.close(write)
    assert result.returncode == 1 and result.stderr == ""


def test_unknown_subcommand_is_a_usage_error():
    result = run("envs", "explode")
    assert result.returncode == 2 and "invalid choice" in result.stderr


@pytest.mark.docker
def test_images_build_is_idempotent_and_gc_reports_json(docker_ready):
    result = run("images", "build")
    assert result.returncode == 0 and result.stdout.strip().endswith(docker_ready.split(":")[-1])
    result = run("sandbox", "gc")
    assert result.returncode == 0, result.stderr
    assert set(json.loads(result.stdout)) >= {"containers", "images"}


def test_serve_on_a_port_in_use_says_so(tmp_path):
    import socket

    from agentgym.models import tiny_model_path

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("serve", "--model", str(tiny_model_path()), "--port", str(port))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1].startswith(f"agentgym serve: cannot listen on 127.0.0.1:{port}: ")
