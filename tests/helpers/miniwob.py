"""Scripted MiniWoB++ solutions: for each solved task, the actions that solve the instance its observation shows."""

import re

from agentgym.envs.web.observation import element_id


def goal_of(text: str) -> str:
    first = text.splitlines()[0]
    assert first.startswith("Goal: "), text[:200]
    return first[len("Goal: ") :]


def quoted(goal: str) -> list[str]:
    return re.findall(r'"([^"]*)"', goal)


def submit(text: str, name: str = "Submit") -> str:
    return f"click({element_id(text, 'button', name)})"


def _checkboxes(text: str) -> list[str]:
    wanted = re.match(r"Select (.*) and click Submit\.", goal_of(text))[1]
    names = [] if wanted == "nothing" else wanted.split(", ")
    return [f"check({element_id(text, 'checkbox', name)})" for name in names] + [submit(text)]


def _case(goal: str) -> str:
    word = quoted(goal)[0]
    return word.upper() if "upper case" in goal else word.lower()


def _ordinal(text: str) -> list[str]:
    nth = int(re.search(r"(\d+)(st|nd|rd|th)", goal_of(text))[1])
    return [f"click({element_id(text, 'textbox', nth=nth - 1)})"]


SOLUTIONS = {
    "click-button": lambda t: [f"click({element_id(t, 'button', quoted(goal_of(t))[0])})"],
    "click-link": lambda t: [f"click({element_id(t, 'span', quoted(goal_of(t))[0])})"],
    "click-test-2": lambda t: [f"click({element_id(t, 'button', goal_of(t).split()[-1].rstrip('.'))})"],
    "click-tab": lambda t: [f"click({element_id(t, 'tab', goal_of(t)[len('Click on ') : -1])})"],
    "enter-text": lambda t: [f'fill({element_id(t, "textbox")}, "{quoted(goal_of(t))[0]}")', submit(t)],
    "enter-text-2": lambda t: [f'fill({element_id(t, "textbox")}, "{_case(goal_of(t))}")', submit(t)],
    "enter-password": lambda t: (
        [f'fill({element_id(t, "textbox", nth=i)}, "{quoted(goal_of(t))[0]}")' for i in (0, 1)] + [submit(t)]
    ),
    "login-user": lambda t: [
        f'fill({element_id(t, "textbox", nth=0)}, "{quoted(goal_of(t))[0]}")',
        f'fill({element_id(t, "textbox", nth=1)}, "{quoted(goal_of(t))[1]}")',
        submit(t, "Login"),
    ],
    "click-checkboxes": _checkboxes,
    "click-option": lambda t: [
        f"check({element_id(t, 'radio', re.match(r'Select (.*) and click', goal_of(t))[1])})",
        submit(t),
    ],
    "choose-list": lambda t: [
        f'select_option({element_id(t, "combobox")}, "{re.match(r"Select (.*) from", goal_of(t))[1]}")',
        submit(t),
    ],
    "focus-text-2": _ordinal,
}
