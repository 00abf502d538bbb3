"""The `agentgym` command line, run as a user runs it (a subprocess of the installed entry point)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

AGENTGYM = [str(Path(sys.executable).with_name("agentgym"))]


def run(*args):
    return subprocess.run([*AGENTGYM, *args], capture_output=True, text=True, timeout=300)


def test_envs_list_names_every_builtin():
    result = run("envs", "list")
    assert result.returncode == 0, result.stderr
    assert "agentgym/HumanEval-v0" in result.stdout and "agentgym/RepoFix-v0" in result.stdout


def test_a_reader_that_left_ends_the_command_quietly():
    read, write = os.pipe()
    os.close(read)  # like `agentgym envs list | head -0`: every write hits a closed pipe
    try:
        result = subprocess.run([*AGENTGYM, "envs", "list"], stdout=write, stderr=subprocess.PIPE, text=True,
                                timeout=300)
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
