"""A new tool-use env in under 40 lines with ToolEnv: a tiny SQLite bank, three tasks, a check; registered, played, forked."""

import gymnasium

from agentgym import register_env
from agentgym.envs.tool import SQLiteState, ToolEnv

TASKS = {
    "pay-rent": {"prompt": "Pay Bob 700 from Alice's account.", "bob": 800},
    "save": {"prompt": "Move 200 from Alice to Carol.", "bob": 100},
    "refund": {"prompt": "Move 50 from Bob back to Alice.", "bob": 50},
}
BANK = "CREATE TABLE accounts(owner TEXT, cents INT); INSERT INTO accounts VALUES ('alice', 1000), ('bob', 100), ('carol', 0)"


def balance(owner: str, state: SQLiteState) -> int:
    """The balance of an account."""
    return state.query("SELECT cents FROM accounts WHERE owner = ?", (owner,))[0][0]


def transfer(source: str, target: str, amount: int, state: SQLiteState) -> str:
    """Move money between accounts (amount: positive, at most the source's balance)."""
    if not 0 < amount <= balance(source, state):
        raise ValueError(f"cannot move {amount} from {source}")
    state.execute("UPDATE accounts SET cents = cents - ? WHERE owner = ?", (amount, source))
    state.execute("UPDATE accounts SET cents = cents + ? WHERE owner = ?", (amount, target))
    return f"moved {amount} from {source} to {target}"


BANK_ID = register_env(
    "Bank-v0",
    ToolEnv,
    tools=[balance, transfer],
    tasks=TASKS,
    variant="bank",
    state_factory=lambda task: SQLiteState(script=BANK),
    check=lambda task, state, transcript: (float(ok := balance("bob", state) == task["bob"]), ok),
)
if __name__ == "__main__":
    env = gymnasium.make(BANK_ID)
    print(env.reset(options={"task_id": "pay-rent"})[0]["text"])
    print(env.step('balance("alice") transfer("alice", "bob", 5000)')[0]["text"])  # two calls, run in order
    branch = env.fork()  # an independent bank, mid-episode
    success = env.step('transfer("alice", "bob", 700) submit()')[4]["success"]
    print("main success:", success, "| branch success:", branch.step("submit()")[4]["success"])
    env.close(), branch.close()
