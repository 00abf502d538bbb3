"""A web task on the self-hosted shop in real Chromium: read the page, act by element id, branch the episode mid-way (browser and server state), and finish both branches."""

import gymnasium

import agentgym  # noqa: F401  (registers agentgym/web.shop-v0)
from agentgym.task import resolve_step

env = gymnasium.make("agentgym/web.shop-v0")
task = {task.id: task for task in env.unwrapped.tasks()}["add_variant/0"]
solution = task.reference_solution()
observation, info = env.reset(options={"task_id": task.id})
print(observation["text"][:900], "\n...")

# Play the first half of the reference solution (each step looks ids up in the page text).
half = len(solution) // 2
for step in solution[:half]:
    action = resolve_step(step, observation["text"])
    observation, reward, terminated, truncated, info = env.step(action)
    print(f"> {action:60} error={info['error']}")

# Branch: the fork has its own browser context and its own copy of the shop's database.
branch = env.fork()
print(
    f"\nforked at turn {env.unwrapped.turn} ({branch.unwrapped.fork_mode}); the branch gives up, the original goes on"
)
print("branch:", branch.step('answer("I could not find it")')[1:3])
for step in solution[half:]:
    action = resolve_step(step, observation["text"])
    observation, reward, terminated, truncated, info = env.step(action)
print(
    "original: reward",
    reward,
    "success",
    info["success"],
    "cart rows:",
    env.unwrapped.app.db.query("SELECT count(*) FROM cart_items")[0][0],
    "vs branch:",
    branch.unwrapped.app.db.query("SELECT count(*) FROM cart_items")[0][0],
)
branch.close()
env.close()
