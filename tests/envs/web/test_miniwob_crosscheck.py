"""The MiniWoB++ cross-check: the same seeds and actions through MiniWoBEnv and through the miniwob package's own Gymnasium env (Selenium + Debian's chromedriver) give equal rewards.

Each plan is written once, per task, from the package's DOM observation (e.g. "click the centre
of the button the utterance names"), as neutral steps — ``("click", x, y)`` and ``("type", text)``
— and translated to both envs: ``mouse_click(x, y)`` / ``keyboard_type(text)`` here,
``CLICK_COORDS`` / ``TYPE_TEXT`` there. Every task gets a plan that should succeed and, where the
task has a wrong choice, one that should fail, so equal rewards are not vacuous. The package
scores with ``get_raw_reward`` (the reward MiniWoBEnv defines; the default one is scaled by
wall-clock time) and keeps its own 10-30 s episode timers, which these short plans never reach.
"""

from __future__ import annotations

import json
import re
import shutil
import urllib.parse

import numpy as np
import pytest

from agentgym.envs.web.miniwob import MiniWoBEnv
from agentgym.sandbox.browser import LAUNCH_ARGS

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)),
        reason="needs Debian's chromium and chromium-driver",
    ),
]


# ---------------------------------------------------------------- the package's env on Debian's Chromium
def package_env():
    """The package's MiniWoBEnvironment driving /usr/bin/chromium through /usr/bin/chromedriver, with our flags.

    SeleniumInstance builds its ChromeOptions inside create_driver, so a small subclass replaces
    that one method (site-packages stays untouched); one driver serves every task of the test.
    """
    from miniwob.environment import MiniWoBEnvironment
    from miniwob.fields import get_field_extractor
    from miniwob.reward import get_raw_reward
    from miniwob.selenium_instance import DEFAULT_BASE_URL, SeleniumInstance
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    class DebianChromiumInstance(SeleniumInstance):
        def create_driver(self):
            options = webdriver.ChromeOptions()
            options.binary_location = CHROMIUM
            # The package's reference env, as root under chromedriver (Chromium refuses its sandbox as root);
            # it renders only the package's own pages, driven by the plans below.
            for flag in ["--headless", "--no-sandbox", *LAUNCH_ARGS]:
                options.add_argument(flag)
            self.driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
            self.driver.implicitly_wait(5)
            self.open_url(self.url)

        def open_url(self, url):
            self.url = url
            self.driver.get(url)
            WebDriverWait(self.driver, 10).until(
                expected_conditions.element_to_be_clickable((By.ID, self.SYNC_SCREEN_ID))
            )
            self.inner_width, self.inner_height = self.driver.execute_script(
                "return [window.innerWidth, window.innerHeight];"
            )

    class PackageEnv(MiniWoBEnvironment):
        def _hard_reset_instance(self):
            if getattr(self, "instance", None):
                self.instance.close()
            self.instance = DebianChromiumInstance(index=0, **self.instance_kwargs)
            self.instance.start()

        def open_task(self, task: str) -> None:
            """Switch the driver to another task page (what a new env would load, minus a browser launch)."""
            self.subdomain = task
            self.instance.field_extractor = get_field_extractor(task)
            self.instance.open_url(urllib.parse.urljoin(DEFAULT_BASE_URL, f"{task}.html"))

    return PackageEnv("click-test", reward_processor=get_raw_reward)


# ---------------------------------------------------------------- plans, from the package's DOM
def center(element) -> tuple[str, int, int]:
    return (
        "click",
        int(element["left"][0] + element["width"][0] / 2),
        int(element["top"][0] + element["height"][0] / 2),
    )


def find(dom, tag=None, text=None, cls=None) -> list:
    return [
        e
        for e in dom
        if (tag is None or e["tag"] == tag)
        and (text is None or e["text"] == text)
        and (cls is None or cls in e["classes"].split())
    ]


def labelled(dom, tag: str, label: str):
    """The input of ``tag`` inside the label whose text is ``label``."""
    text = find(dom, "t", label)[0]
    return next(e for e in dom if e["parent"] == text["parent"] and e["tag"] == tag)


def quoted(utterance: str) -> list[str]:
    return re.findall(r'"([^"]*)"', utterance)


def by_text(tag):
    """Click the ``tag`` whose text is the utterance's first quoted word; fail on another one."""

    def plan(u, dom):
        wanted = quoted(u)[0]
        others = [e for e in find(dom, tag) if e["text"] != wanted]
        return [center(find(dom, tag, wanted)[0])], [center(others[0])] if others else None

    return plan


def button_one_two(u, dom):
    name = u.split()[-1].rstrip(".")
    other = "TWO" if name == "ONE" else "ONE"
    return [center(find(dom, "button", name)[0])], [center(find(dom, "button", other)[0])]


def type_and_submit(answer):
    def plan(u, dom):
        box = (find(dom, "input_text") + find(dom, "textarea"))[0]
        button = find(dom, "button", "Submit")[0]
        right = answer(u, dom)
        return [center(box), ("type", right), center(button)], [center(box), ("type", right + "zq"), center(button)]

    return plan


def checkboxes(u, dom):
    wanted = re.match(r"Select (.*) and click Submit\.", u)[1]
    names = [] if wanted == "nothing" else wanted.split(", ")
    submit = center(find(dom, "button", "Submit")[0])
    wrong = [e["text"] for e in find(dom, "t") if e["text"] not in names]
    success = [center(labelled(dom, "input_checkbox", name)) for name in names] + [submit]
    return success, [center(labelled(dom, "input_checkbox", wrong[0])), submit] if wrong else None


def option(u, dom):
    wanted = re.match(r"Select (.*) and click Submit\.", u)[1]
    submit = center(find(dom, "button", "Submit")[0])
    wrong = [e["text"] for e in find(dom, "t") if e["text"] != wanted]
    return [center(labelled(dom, "input_radio", wanted)), submit], [
        center(labelled(dom, "input_radio", wrong[0])),
        submit,
    ]


def login(u, dom):
    user, password = quoted(u)
    fields = [center(find(dom, "input_text")[0]), center(find(dom, "input_password")[0])]
    button = center(find(dom, "button", "Login")[0])
    return (
        [fields[0], ("type", user), fields[1], ("type", password), button],
        [fields[0], ("type", user), fields[1], ("type", password + "x"), button],
    )


def password(u, dom):
    word = quoted(u)[0]
    a, b = (center(e) for e in find(dom, "input_password"))
    submit = center(find(dom, "button", "Submit")[0])
    return [a, ("type", word), b, ("type", word), submit], [a, ("type", word), b, ("type", word[::-1] + "q"), submit]


def nth_textbox(u, dom):
    nth = int(re.search(r"(\d)(st|nd|rd)", u)[1]) - 1
    boxes = find(dom, "input_text")
    return [center(boxes[nth])], [center(boxes[(nth + 1) % len(boxes)])]


def tab(u, dom):
    name = re.search(r"Tab #\d+", u)[0]
    return [center(find(dom, "a", name)[0])], [center(next(e for e in find(dom, "a") if e["text"] != name))]


def dialog_button(u, dom):
    wanted = quoted(u)[0]
    close = find(dom, "button", cls="ui-dialog-titlebar-close")
    target = close[0] if wanted == "x" else find(dom, "button", wanted)[0]
    others = [e for e in find(dom, "button") if e["ref"] != target["ref"]]
    return [center(target)], [center(others[0])] if others else None


WIDGET_TAGS = {
    "button": "button",
    "text": "input_text",
    "textarea": "textarea",
    "radio": "input_radio",
    "checkbox": "input_checkbox",
}


def widget(u, dom):
    wanted = WIDGET_TAGS[quoted(u)[0]]
    others = [e for tag in WIDGET_TAGS.values() if tag != wanted for e in find(dom, tag)]
    return [center(find(dom, wanted)[0])], [center(others[0])] if others else None


def arithmetic(u, dom):
    problem = next(e["text"] for e in dom if e["text"].endswith("="))
    a, op, b = problem.rstrip("= ").split()
    return str({"+": int(a) + int(b), "-": int(a) - int(b), "x": int(a) * int(b)}[op])


def case(u, dom):
    word = quoted(u)[0]
    return word.upper() if "upper case" in u else word.lower()


PLANS = {
    "click-button": by_text("button"),
    "unicode-test": by_text("button"),
    "click-link": by_text("span"),
    "click-test-2": button_one_two,
    "click-test-transfer": button_one_two,
    "click-button-sequence": lambda u, dom: (
        [center(find(dom, "button", "ONE")[0]), center(find(dom, "button", "TWO")[0])],
        [center(find(dom, "button", "TWO")[0])],
    ),
    "click-test": lambda u, dom: ([center(find(dom, "button")[0])], None),
    "focus-text": lambda u, dom: ([center(find(dom, "input_text")[0])], None),
    "focus-text-2": nth_textbox,
    "click-dialog": dialog_button,
    "click-dialog-2": dialog_button,
    "click-tab": tab,
    "click-widget": widget,
    "click-checkboxes": checkboxes,
    "click-checkboxes-transfer": checkboxes,
    "click-option": option,
    "login-user": login,
    "enter-password": password,
    "enter-text": type_and_submit(lambda u, dom: quoted(u)[0]),
    "enter-text-dynamic": type_and_submit(lambda u, dom: quoted(u)[0]),
    "enter-text-2": type_and_submit(case),
    "text-transform": type_and_submit(lambda u, dom: "".join(e["text"] for e in find(dom, "span"))),
    "simple-arithmetic": type_and_submit(arithmetic),
}


# ---------------------------------------------------------------- running a plan through both
def run_ours(env: MiniWoBEnv, seed: int, plan: list) -> list[tuple[float, bool]]:
    obs, _ = env.reset(options={"instance_seed": seed})
    results = []
    for step in plan:
        action = f"mouse_click({step[1]}, {step[2]})" if step[0] == "click" else f"keyboard_type({json.dumps(step[1])})"
        obs, reward, terminated, truncated, info = env.step(action)
        assert info["error"] is None, (action, info["error"])
        results.append((float(reward), bool(terminated)))
        if terminated:
            break
    return results


def run_package(env, seed: int, plan: list) -> list[tuple[float, bool]]:
    env.reset(seed=seed, options={"record_screenshots": False})
    results = []
    for step in plan:
        if step[0] == "click":
            action = env.create_action("CLICK_COORDS", coords=np.array(step[1:], dtype=np.float32))
        else:
            action = env.create_action("TYPE_TEXT", text=step[1])
        _, reward, terminated, _, _ = env.step(action)
        results.append((float(reward), bool(terminated)))
        if terminated:
            break
    return results


# Every planned task is a few seconds on two cores: `make test` plays every fourth one, `make test-sweeps` all.
@pytest.mark.parametrize("every", [pytest.param(1, marks=pytest.mark.sweep, id="all"), pytest.param(4, id="sampled")])
def test_rewards_equal_the_packages_own_env(every):
    assert len(PLANS) >= 20
    planned = list(PLANS.items())[::every]
    package = package_env()
    outcomes, mismatches = [], []
    try:
        for number, (task, make_plan) in enumerate(planned):
            seed = 1000 + number * every  # the same instance of each task in both runs
            package.open_task(task)
            obs, _ = package.reset(seed=seed, options={"record_screenshots": False})
            success, failure = make_plan(obs["utterance"], obs["dom_elements"])
            env = MiniWoBEnv(task)
            try:
                ours_obs, _ = env.reset(options={"instance_seed": seed})
                assert ours_obs["text"].splitlines()[0] == "Goal: " + obs["utterance"], task  # the same instance
                for kind, plan in (("success", success), ("failure", failure)):
                    if plan is None:
                        continue
                    theirs, ours = run_package(package, seed, plan), run_ours(env, seed, plan)
                    outcomes.append((task, kind, theirs[-1][0]))
                    if theirs != ours:
                        mismatches.append(f"{task} {kind} (seed {seed}): package {theirs}, ours {ours}, plan {plan}")
            finally:
                env.close()
    finally:
        package.close()
    assert not mismatches, "\n".join(mismatches)
    final = {(task, kind): reward for task, kind, reward in outcomes}
    assert sum(reward > 0 for reward in final.values()) >= 20 // every, final
    assert sum(reward <= 0 for reward in final.values()) >= 10 // every, final
    assert all(final[(task, "success")] == 1.0 for task, _ in planned), final  # the plans really solve the tasks
