"""The desktop env end to end: a spreadsheet task solved by its scripted reference, forked halfway, both branches checked.

    .venv/bin/python examples/gui_env.py [--task sheet-line-totals] [--out runs/gui-example]

Needs the desktop image (`agentgym images build --desktop`). Saves the screenshots as .npy files
(H×W×3 uint8) in --out, so nothing beyond numpy is needed to look at them.
"""

import argparse
from pathlib import Path

import gymnasium
import numpy as np

import agentgym  # noqa: F401  (registers agentgym/gui.desktop-v0)
from agentgym.envs.gui.tasks import TASKS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="sheet-line-totals", choices=sorted(TASKS))
    parser.add_argument("--out", default="runs/gui-example")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = gymnasium.make("agentgym/gui.desktop-v0", tasks=[args.task])
    solution = env.unwrapped.tasks()[0].reference_solution()
    half = len(solution) // 2
    try:
        observation, _ = env.reset(options={"task_id": args.task})
        print(observation["text"].splitlines()[0])
        for step in solution[:half]:
            observation, *_ = env.step(step)
            print(f"  {step:45} -> {observation['text'].splitlines()[0]}")
        np.save(out / "halfway.npy", observation["image"])
        with env.snapshot() as snapshot:
            print(f"snapshot at turn {snapshot.turn}: {snapshot.metadata['fork']} fork")
            branch = env.fork(snapshot)
        try:
            for name, target in (("original", env), ("fork", branch)):
                for step in solution[half:]:
                    observation, reward, terminated, truncated, info = target.step(step)
                np.save(out / f"{name}-end.npy", observation["image"])
                print(f"{name}: success={info['success']} reward={reward} ({observation['text']})")
        finally:
            branch.close()
    finally:
        env.close()


if __name__ == "__main__":
    main()
