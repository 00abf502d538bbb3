"""agentgym.trainers: RL trainers on TRL and Accelerate (tree GRPO, SAO); see the trainers issue."""
