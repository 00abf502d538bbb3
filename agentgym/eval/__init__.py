"""agentgym eval: run benchmark suites against a model, score the episodes and write a report."""
