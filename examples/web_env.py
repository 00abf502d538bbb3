"""A web task on the self-hosted shop in real Chromium: read the page, act by element id, branch the episode mid-way (browser and server state), and finish both branches."""

import gymnasium

import agentgym  # noqa: F401  (registers agentgym/web.shop-v0)
from agentgym.envs.web.app_env import app_tasks

env = gymnasium.make("agentgym/web.shop-v0")
task = app_tasks("shop")["add_variant/0"]
observation, info = env.reset(options={"task_id": task.id})
print(observation["text"][:900], "\n...")

# Play the first half of the reference solution (each step looks ids up in the page text).
half = len(task.solution) // 2
for step in task.solution[:half]:
    action = step(observation["text"]) if callable(step) else step
    observation, reward, terminated, truncated, info = env.step(action)
    print(f"> {action:60} error={info['error']}")

# Branch: the fork has its own browser context and its own copy of the shop's database.
branch = env.fork()
print(f"\nforked at turn {env.turn} ({branch.fork_mode}); the branch gives up, the original goes on")
print("branch:", branch.step('answer("I could not find it")')[1:3])
for step in task.solution[half:]:
    action = step(observation["text"]) if callable(step) else step
    observation, reward, terminated, truncated, info = env.step(action)
print(
    "original: reward",
    reward,
    "success",
    info["success"],
    "cart rows:",
    env.unwrapped.app.db.query("SELECT count(*) FROM cart_items")[0][0],
    "vs branch:",
    branch.app.db.query("SELECT count(*) FROM cart_items")[0][0],
)
branch.close()
env.close()
