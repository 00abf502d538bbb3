"""Playing an episode from a list of replies."""


def play(env, replies):
    """The step results of ``replies`` up to the end of the episode: (observation, reward, terminated, info)."""
    for reply in replies:
        observation, reward, terminated, _, info = env.step(reply)
        if terminated:
            break
    return observation, reward, terminated, info
