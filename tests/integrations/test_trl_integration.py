"""agentgym envs in TRL's own GRPOTrainer (agentgym.integrations.trl): the generated environment objects driven as TRL drives them, and two real training steps on KeyChain and on BFCL with the tiny local model."""

from __future__ import annotations

import gc
import json
import pickle

import pytest

pytest.importorskip("trl")
pytest.importorskip("bfcl_eval")

from transformers.utils import get_json_schema  # noqa: E402

from agentgym.envs.tool.bfcl import from_bfcl_call, load_tasks  # noqa: E402
from agentgym.envs.tool.keychain import make_task  # noqa: E402
from agentgym.integrations.trl import (  # noqa: E402
    AgentgymEnvironment,
    EnvironmentFactory,
    agentgym_reward,
    environment_factory,
    task_dataset,
)

KEYCHAIN = "agentgym/tool.keychain-v0"
BFCL = "agentgym/tool.bfcl-multi-turn-base-v0"
# Two BFCL tasks with different API classes (TradingBot; GorillaFileSystem): two tool groups.
BFCL_TASKS = ["multi_turn_base_100", "multi_turn_base_1"]


def tool_schemas(environment: AgentgymEnvironment) -> dict[str, dict]:
    """What TRL shows the model: transformers' schema of each public method, as TRL collects them."""
    return {name: get_json_schema(getattr(environment, name))["function"] for name in environment.tool_names}


def final(text: str) -> list[dict]:
    """A conversational completion whose last message is a text reply."""
    return [{"role": "assistant", "content": text}]


def test_keychain_objects_are_driven_as_trl_drives_them():
    factory = environment_factory(KEYCHAIN, num_tasks=3)
    assert isinstance(factory, EnvironmentFactory)
    factory = pickle.loads(pickle.dumps(factory))  # TRL's async workers receive the factory pickled
    dataset = task_dataset(KEYCHAIN, num_tasks=3)
    assert dataset.column_names == ["prompt", "task_id"]
    assert dataset["task_id"] == ["train-0", "train-1", "train-2"]

    environment = factory()
    assert environment.tool_names == ("lookup", "submit")  # KeyChain takes no text replies: no reply tool
    schemas = tool_schemas(environment)
    assert schemas["lookup"]["parameters"] == {
        "type": "object",
        "properties": {"key": {"type": "string", "description": "The key argument."}},
        "required": ["key"],
    }
    assert schemas["submit"]["parameters"]["properties"]["answer"]["type"] == "string"
    assert "required" not in schemas["submit"]["parameters"]  # answer is optional, as in the env's schema

    row = dataset[1]
    observation = environment.reset(**row)
    task = environment.env.unwrapped.task_data["train-1"]
    assert environment.env.unwrapped.task_id == "train-1"
    assert observation == task["prompt"]

    # Bad arguments are normal input: the env's error text comes back, nothing is raised.
    assert environment.lookup().startswith("Error: lookup(key: string): missing required argument(s) 'key'")
    assert "must be string, got int" in environment.lookup(key=7)
    assert "unknown argument 'self'" in environment.lookup(key="amber", self=1)
    assert [call["error"] is not None for call in environment.calls] == [True, True, True]

    key = task["start"]
    while True:
        entry = environment.lookup(key=key)
        assert entry.startswith(f"{key}: ")
        if not entry.split(": ", 1)[1].startswith("see "):
            break
        key = entry.split('"')[1]
    assert agentgym_reward([final("thinking")], [environment]) == [0.0]  # KeyChain ignores text; not over
    assert not environment.done
    environment.submit(answer=task["answer"])
    assert environment.done
    assert agentgym_reward([final("done")], [environment]) == [1.0]

    # A new episode on the same (pooled) object starts from nothing; a wrong answer earns nothing.
    environment.reset(**dataset[1])
    assert environment.calls == [] and environment.reward == 0.0
    environment.submit(answer=str(int(task["answer"]) + 1))
    assert agentgym_reward([final("")], [environment]) == [0.0]
    # A call after the end reaches the env, which says the episode is over.
    assert "the episode is over" in environment.lookup(key="amber")

    # Without a task id (TRL's placeholder rows when there is no train_dataset) the env draws one.
    environment.reset(prompt=[{"role": "user", "content": ""}])
    assert environment.env.unwrapped.task_id in {"train-0", "train-1", "train-2"}

    env = environment.env.unwrapped
    del environment
    gc.collect()
    assert env._closed  # the object's env is closed with it


def test_bfcl_tasks_are_grouped_by_their_tools_and_scored_by_bfcl():
    factories = environment_factory(BFCL, tasks=BFCL_TASKS)
    assert isinstance(factories, dict) and sorted(factories) == sorted(BFCL_TASKS)
    dataset = task_dataset(BFCL, tasks=BFCL_TASKS)
    assert dataset["environment"] == dataset["task_id"] == BFCL_TASKS
    tasks = load_tasks("base")
    for row in dataset:
        environment = factories[row["environment"]]()
        # reset(**row) as TRL calls it in its multi-environment mode (without the routing column).
        observation = environment.reset(**{key: value for key, value in row.items() if key != "environment"})
        assert tasks[row["task_id"]]["question"][0][0]["content"] in observation
        tools = {tool.name: tool.to_openai()["function"] for tool in environment.env.unwrapped.tools()}
        schemas = tool_schemas(environment)
        # Exactly this task's tools (the env's info["tools"]), plus the reply tool; names, required
        # parameters and types survive the trip through Python signatures and transformers' parser.
        assert environment.tool_names[-1] == environment.reply_tool == "reply"
        assert set(schemas) == set(tools) | {"reply"}
        for name, tool in tools.items():
            want, got = tool["parameters"], schemas[name]["parameters"]
            assert list(got["properties"]) == list(want["properties"]), name
            assert set(got.get("required", [])) == set(want.get("required", [])), name
            for parameter, schema in want["properties"].items():
                assert got["properties"][parameter]["type"] == schema["type"], (name, parameter)
                assert " ".join(schema.get("description", "").split()) in got["properties"][parameter]["description"]
            assert schemas[name]["description"] == " ".join(tool["description"].split())

    # The ground truth played through the methods (the reply tool ends each user turn) is a BFCL pass.
    task = tasks["multi_turn_base_100"]
    environment = factories["multi_turn_base_100"]()
    environment.reset(task_id=task["id"])
    for turn, calls in enumerate(task["ground_truth"]):
        for text in calls:
            call = from_bfcl_call(text, task["involved_classes"])
            assert not getattr(environment, call.name)(**call.arguments).startswith("Error")
        if turn < len(task["ground_truth"]) - 1:
            next_turn = environment.reply(message="Done.")
            assert next_turn in "\n\n".join(m["content"] for m in task["question"][turn + 1])
    assert not environment.done
    # The rollout's final text reply reaches the env, which ends the conversation and scores it.
    assert agentgym_reward([final("Done.")], [environment]) == [1.0]
    assert environment.done and environment.env.unwrapped.verdict()["valid"]

    # Stopping short of the ground truth, or calling a tool of another task's API, is no pass.
    environment.reset(task_id=task["id"])
    assert "unknown tool 'ls'" in environment._call_tool("ls", {})
    assert agentgym_reward([final("I am done.")], [environment]) == [0.0]
    assert not environment.done  # the next user turn came; TRL's rollout is over, unscored
    environment.reset(task_id=task["id"])
    for _ in task["ground_truth"]:
        environment.reply(message="No.")
    assert environment.done and agentgym_reward([final("ignored")], [environment]) == [0.0]


def test_a_tool_name_that_cannot_be_a_method_is_a_clear_error():
    from agentgym.actions import ToolSpec

    for name in ("reset", "get_reward", "reward", "_hidden", "class", "has-dash"):
        with pytest.raises(ValueError, match="cannot be a method of a TRL environment"):
            EnvironmentFactory(KEYCHAIN, {}, (ToolSpec(name, "x"),))()


def test_agentgym_reward_needs_the_environments():
    with pytest.raises(ValueError, match="environment_factory"):
        agentgym_reward([final("x")])


# ---------------------------------------------------------------------- TRL's own GRPOTrainer
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny local model (random weights) and its tokenizer, ready for TRL's tool loop."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import qwen3_template

    from agentgym.models.tiny import tiny_model_path

    path = tiny_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    # TRL sets a response parser only for chat templates it knows; the tiny model's ChatML-with-tools
    # template writes tool calls as Qwen's does (<tool_call>{json}</tool_call>), so Qwen's parser reads them.
    tokenizer.response_template = qwen3_template
    # BFCL prompts (instructions, user turn, the task's tool schemas) run to ~4-5k tokens: rotary
    # positions need no retraining to go past the 4096 the config states.
    model = AutoModelForCausalLM.from_pretrained(path, max_position_embeddings=16384)
    return model, tokenizer


class Recorder:
    """A reward function, listed after agentgym_reward, that records what TRL hands reward functions (and scores nothing)."""

    __name__ = "recorder"

    def __init__(self):
        self.batches: list[list[dict]] = []

    def __call__(self, completions, environments, task_id, **kwargs):
        # TRL pools and resets its environment objects step after step: keep what they hold now.
        self.batches.append(
            [
                {
                    "completion": completion,
                    "row_task": row_task,
                    "env_task": environment.env.unwrapped.task_id,
                    "reached": [call["tool"] for call in environment.calls if call["tool"] is not None],
                    "reward": environment.reward,
                    "environment": environment,
                }
                for completion, environment, row_task in zip(completions, environments, task_id, strict=True)
            ]
        )
        return [None] * len(completions)


def made_calls(completion: list[dict], tool_names: tuple[str, ...]) -> list[str]:
    """The calls TRL ran from a completion: of each assistant message answered by tool results, its calls of known tools with object arguments."""
    return [
        call["function"]["name"]
        for message, after in zip(completion, completion[1:])
        if message["role"] == "assistant" and after["role"] == "tool"
        for call in message.get("tool_calls") or []
        if call["function"]["name"] in tool_names and isinstance(call["function"].get("arguments"), dict)
    ]


def scripted(tokenizer, calls: list[tuple[str, dict]]) -> dict:
    """Generation kwargs that make the random tiny model write exactly these tool calls, then end its reply.

    transformers' ``sequence_bias`` raises each token of the script after the script's tokens before it
    (longer prefixes more), so sampling follows the script: a real policy whose reply is known, so that
    the test can tell where each call must land and what it must earn. Everything else (TRL's parsing,
    tool loop, reward) runs as in training.
    """
    text = "\n".join(
        f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>" for name, arguments in calls
    )
    ids = tokenizer(text + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
    return {"sequence_bias": {tuple(ids[: i + 1]): 100.0 * (i + 1) for i in range(len(ids))}}


BFCL_SOLUTION = [  # multi_turn_base_100's ground truth, each user turn ended with the reply tool
    ("get_stock_info", {"symbol": "NVDA"}),
    ("reply", {"message": "Done."}),
    ("fund_account", {"amount": 2203.4}),
    ("reply", {"message": "Done."}),
]
CASES = {
    # KeyChain: submit train-0's answer at once (right for train-0 only).
    "keychain": (KEYCHAIN, {"num_tasks": 4}, [("submit", {"answer": make_task("train-0")["answer"]})]),
    # BFCL: multi_turn_base_100 solved in one reply; in the other group (GorillaFileSystem) those tools do not exist.
    "bfcl": (BFCL, {"tasks": BFCL_TASKS}, BFCL_SOLUTION),
}


def expected_reward(env_id: str, task_id: str) -> float:
    if env_id == KEYCHAIN:
        return float(make_task(task_id)["answer"] == make_task("train-0")["answer"])
    return float(task_id == "multi_turn_base_100")


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_trls_grpo_trainer_trains_two_steps(case, tiny, tmp_path, monkeypatch):
    from trl import GRPOConfig, GRPOTrainer

    env_id, env_kwargs, script = CASES[case]
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    model, tokenizer = tiny
    recorder = Recorder()
    args = GRPOConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=512,  # room for every tool result: TRL drops results that overflow it
        max_tool_calling_iterations=1,
        generation_kwargs=scripted(tokenizer, script),
        learning_rate=1e-4,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[agentgym_reward, recorder],
        args=args,
        train_dataset=task_dataset(env_id, **env_kwargs),
        processing_class=tokenizer,
        environment_factory=environment_factory(env_id, **env_kwargs),
    )
    trainer.train()

    assert trainer.state.global_step == 2
    assert len(recorder.batches) == 2
    logged = [entry for entry in trainer.state.log_history if "rewards/agentgym_reward/mean" in entry]
    assert len(logged) == 2
    for batch, log in zip(recorder.batches, logged, strict=True):
        assert len(batch) == 2
        for rollout in batch:
            environment = rollout["environment"]
            assert isinstance(environment, AgentgymEnvironment)
            assert rollout["env_task"] == rollout["row_task"]  # reset(**row) reset to the row's task
            # Every call TRL ran from the model's replies reached this rollout's env, in order.
            assert rollout["reached"] == made_calls(rollout["completion"], environment.tool_names)
            assert rollout["reward"] == expected_reward(env_id, rollout["row_task"])
            if env_id == BFCL:  # the prompt showed this task's tools only (its group)
                assert environment.tool_names[:-1] == tuple(tool.name for tool in environment.env.unwrapped.tools())
        assert log["rewards/agentgym_reward/mean"] == pytest.approx(sum(r["reward"] for r in batch) / len(batch))
    reached = [name for batch in recorder.batches for rollout in batch for name in rollout["reached"]]
    assert reached, "the scripted tool calls reached no env"
    assert all(p.isfinite().all() for p in model.parameters())
