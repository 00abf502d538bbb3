"""Code environments in Docker sandboxes: HumanEval (write a function) and RepoFix (fix a bug in a repository)."""
