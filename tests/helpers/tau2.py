"""τ²-bench test helpers: τ²'s own evaluate_simulation (importable without litellm), and playing replies through a Tau2Env."""

import copy
import sys
import types
import uuid

from agentgym.envs.conversation.tau2 import Tau2Env, tau2_environment


def tau2_evaluate_simulation():
    """τ²'s own ``evaluate_simulation`` (its module), importable here.

    Its module imports τ²'s registry and NL-assertion judge, which import litellm (not installed:
    it calls hosted models). Where litellm is missing, the test stands in for those two modules
    only: a registry that returns τ²'s real environment constructors, and a judge that is never
    called (no task of the base sets has NL assertions in its reward basis, and the evaluation type
    used is ALL, which does not run them).
    """
    try:
        import litellm  # noqa: F401
    except ModuleNotFoundError:
        if "tau2.registry" not in sys.modules:
            registry = types.ModuleType("tau2.registry")
            registry.registry = types.SimpleNamespace(get_env_constructor=tau2_environment)
            sys.modules["tau2.registry"] = registry
        if "tau2.utils.llm_utils" not in sys.modules:
            llm_utils = types.ModuleType("tau2.utils.llm_utils")

            def generate(*args, **kwargs):
                raise AssertionError("the NL-assertion judge must not be called in these tests")

            llm_utils.generate = generate
            sys.modules["tau2.utils.llm_utils"] = llm_utils
    from tau2.data_model.simulation import SimulationRun, TerminationReason
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    def evaluate(env: Tau2Env) -> float:
        task = env.tau2_task()
        reason = {"user_stop": TerminationReason.USER_STOP, "agent_stop": TerminationReason.AGENT_STOP}.get(
            env.termination, TerminationReason.MAX_STEPS
        )
        run = SimulationRun(
            id=str(uuid.uuid4()),
            task_id=task.id,
            start_time="",
            end_time="",
            duration=0.0,
            termination_reason=reason,
            messages=copy.deepcopy(env.messages),
        )
        return evaluate_simulation(run, task, EvaluationType.ALL, solo_mode=False, domain=env.domain).reward

    return evaluate


def play(env, task_id, replies):
    """Play replies from reset until the episode ends; (reward, terminated, info) of the last step."""
    env.reset(options={"task_id": task_id})
    reward, terminated, info = 0.0, False, {}
    for reply in replies:
        _, reward, terminated, truncated, info = env.step(reply)
        if terminated or truncated:
            break
    return reward, terminated, info
