"""agentgym.eval: run benchmark suites against a policy, score the episodes (success, pass@k, pass^k) and write a report; branching evaluation (DIVERT).

``agentgym eval --suite <suite> --policy <model or endpoint>`` is the command; these are its
parts: :func:`load_suite` (a built-in suite or a YAML file), :func:`evaluate` (the harness),
the metrics (pure functions) and the report. ``agentgym eval --branching`` is
:func:`run_branching` against :func:`run_monte_carlo` (:mod:`agentgym.eval.branching`). Names
load on first use.
"""

from typing import TYPE_CHECKING

from agentgym._lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name loads on first use
    from agentgym.eval.branching import BranchingConfig, failure_metrics, run_branching, run_monte_carlo
    from agentgym.eval.harness import PolicyUnavailableError, evaluate, load_results
    from agentgym.eval.metrics import (
        bootstrap_ci,
        compare,
        mean_pass_at_k,
        mean_pass_hat_k,
        pass_at_k,
        pass_hat_k,
        per_task,
        summarize,
    )
    from agentgym.eval.report import compare_report, write_report
    from agentgym.eval.suites import Suite, load_suite

_EXPORTS = {
    "BranchingConfig": "branching",
    "failure_metrics": "branching",
    "run_branching": "branching",
    "run_monte_carlo": "branching",
    "Suite": "suites",
    "load_suite": "suites",
    "PolicyUnavailableError": "harness",
    "evaluate": "harness",
    "load_results": "harness",
    "bootstrap_ci": "metrics",
    "compare": "metrics",
    "mean_pass_at_k": "metrics",
    "mean_pass_hat_k": "metrics",
    "pass_at_k": "metrics",
    "pass_hat_k": "metrics",
    "per_task": "metrics",
    "summarize": "metrics",
    "compare_report": "report",
    "write_report": "report",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
