"""BFCL multi-turn helpers: a task's ground truth as a trajectory of replies, and the state BFCL's checker compares."""


def ground_truth(task, one_call_per_reply=False):
    """Per user turn, the replies (lists of call strings) that play the task's ground truth: one per turn, or one per call."""
    if one_call_per_reply:
        return [[[call] for call in turn] for turn in task["ground_truth"]]
    return [[turn] if turn else [] for turn in task["ground_truth"]]


def public_state(env):
    """What BFCL's state checker compares: every instance's public attributes."""
    return {
        name: {k: v for k, v in vars(instance).items() if not k.startswith("_")}
        for name, instance in env.state.instances.items()
    }
