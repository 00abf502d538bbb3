# The two commands: `make demo` (the main job) and `make test`. Both set everything up first.
.PHONY: setup demo test test-fast test-sweeps flakes lint bench clean-sandboxes

setup:
	./scripts/setup.sh

demo: setup
	.venv/bin/python examples/scripted_code_eval.py
	.venv/bin/python examples/tool_env.py
	.venv/bin/python examples/web_env.py
	.venv/bin/python examples/rollouts.py
	.venv/bin/python examples/train_demo.py
	@echo "agentgym is installed in .venv: 'source .venv/bin/activate' puts the agentgym command on PATH"

# Under scripts/netns: a network namespace with only loopback, where the Ray tests' clusters bind 127.0.0.1.
test: setup
	scripts/netns .venv/bin/python -m pytest -q -p no:cacheprovider --durations=30 -m "not sweep"

# Whole catalogues through the real engines (every τ², desktop-app, RepoFix and web-app task): tens of minutes on two cores,
# so not in `make test`; each has a sampled twin there.
test-sweeps: setup
	scripts/netns .venv/bin/python -m pytest -q -p no:cacheprovider --durations=30 -m sweep

# The inner loop: everything but the tests marked slow (whole-benchmark sweeps, training runs).
test-fast: setup
	scripts/netns .venv/bin/python -m pytest -q -p no:cacheprovider -m "not slow and not sweep"

# Flake hunting: each test TESTS selects, run N times alone (a fresh pytest each time), with its pass count.
# Runs take turns with other heavy jobs on a shared machine through LOCK (an flock per run).
# Example: make flakes TESTS="tests/memory/test_validation.py tests/trainers/test_lora.py" N=20
N ?= 10
LOCK ?= /tmp/agentgym-heavy.lock
flakes: setup
	.venv/bin/python scripts/flake_hunt.py -n $(N) $(if $(LOCK),--lock $(LOCK)) $(TESTS)

# Ruff (lint and format) and mypy, configured in pyproject.toml; `make test` runs all three too (tests/test_style.py,
# mypy marked slow: its first run reads torch's and transformers' types, a minute of CPU; its cache makes later runs seconds).
lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy

bench: setup
	.venv/bin/python benchmarks/sandbox.py
	.venv/bin/python benchmarks/rollout.py

clean-sandboxes:
	.venv/bin/agentgym sandbox gc --all
