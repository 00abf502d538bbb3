"""The web evaluators against reward hacks, through ``env.step`` text only: each app's and MiniWoB++'s reference solutions score 1, known hacks score 0."""

import json

import pytest

from agentgym.envs.web.app_env import WebAppEnv
from agentgym.envs.web.apps.mail.views import FOLDER_TITLES
from agentgym.envs.web.apps.shop.data import catalog
from agentgym.envs.web.miniwob import MiniWoBEnv
from agentgym.envs.web.observation import element_id, elements
from agentgym.envs.web.tasks import run_solution
from tests.helpers.miniwob import SOLUTIONS as MINIWOB_SOLUTIONS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def envs():
    """One env per app, reused by every case (a reset restores the seeded database)."""
    opened = {}

    def get(app):
        if app not in opened:
            opened[app] = WebAppEnv(app, max_turns=60)
        return opened[app]

    yield get
    for env in opened.values():
        env.close()


def reward_of(env, task_id, actions):
    """Reset to ``task_id``, play ``actions`` (strings, or functions of the observation text); the last reward."""
    observation, _ = env.reset(options={"task_id": task_id})
    reward, terminated = 0.0, False
    for action in actions:
        assert not terminated, f"{task_id}: the episode ended before {action!r}"
        text = action(observation["text"]) if callable(action) else action
        observation, reward, terminated, _, info = env.step(text)
    assert terminated, f"{task_id}: the hack never ended the episode"
    return reward


def answer(text):
    return f"answer({json.dumps(text)})"


def solution_without_answer(env, task_id):
    return list(env.task(task_id).solution[:-1])  # every reference solution ends with its answer()


# ---------------------------------------------------------------- reference solutions score 1
REFERENCES = {
    "shop": [
        "cheapest_kind/0",
        "order_items_on_date/0",
        "review_count/0",
        "browse_brand_sorted/0",
        "add_variant/0",
        "checkout/0",
    ],
    "mail": [
        "sender_of_subject/0",
        "contact_phone/0",
        "offsite_venue/0",
        "nav_search_text/0",
        "mark_unread/0",
        "delete_subject/0",
        "restore_from_trash/0",
        "reply_latest_from/0",
    ],
    "wiki": ["last_editor/0", "nav_history/0", "append_text/0", "edit_or_denied/0", "login_contributions/0"],
}


@pytest.mark.parametrize("app, task_id", [(app, task) for app, tasks in REFERENCES.items() for task in tasks])
def test_reference_solution_scores_one(envs, app, task_id):
    env = envs(app)
    _, reward, terminated, info = run_solution(env, task_id, env.task(task_id).solution)
    assert (reward, terminated, info["success"]) == (1.0, True, True), info


# ---------------------------------------------------------------- answers
def test_an_answer_listing_every_candidate_scores_zero(envs):
    everything = ", ".join(product.name for product in catalog().products)
    shop = envs("shop")
    for task_id in ("cheapest_kind/0", "order_items_on_date/0", "cheapest_brand_in_category/0"):
        parts = ", ".join(shop.task(task_id).evaluator.parts)  # the right answer among all the others
        assert reward_of(shop, task_id, [answer(f"{everything}; {parts}")]) == 0.0, task_id
    mail = envs("mail")
    people = ", ".join(
        sorted(
            {name for (name,) in mail.app.db.query("SELECT sender_name FROM messages UNION SELECT name FROM contacts")}
        )
    )
    phones = ", ".join(phone for (phone,) in mail.app.db.query("SELECT phone FROM contacts"))
    assert reward_of(mail, "sender_of_subject/0", [answer(people)]) == 0.0
    assert reward_of(mail, "thread_last_writer/0", [answer(people)]) == 0.0
    assert reward_of(mail, "contact_phone/0", [answer(phones)]) == 0.0


def test_near_miss_answers_score_zero(envs):
    shop = envs("shop")
    task = shop.task("cheapest_brand_in_category/0")
    name, price = task.evaluator.parts
    assert reward_of(shop, task.id, [answer(f"{name}, $1{price}")]) == 0.0  # "119.49" is not "19.49"
    assert reward_of(shop, task.id, [answer(f"{name}, ${price}")]) == 1.0


def test_the_answer_typed_into_the_page_is_no_answer(envs):
    # The search box, the URL, the page: an evaluator reads only answer(), the final URL and the database.
    shop = envs("shop")
    task = shop.task("cheapest_kind/0")
    name = task.evaluator.parts[0]
    steps = [
        lambda text: f"fill({element_id(text, 'searchbox', 'Search products')}, {json.dumps(name)})",
        'press("Enter")',
        answer(""),
    ]
    assert reward_of(shop, task.id, steps) == 0.0


# ---------------------------------------------------------------- where the agent ends up
def test_pages_of_its_own_making_are_refused(envs):
    shop = envs("shop")
    task = shop.task("browse_brand_sorted/0")
    path = task.evaluator.path
    query = "&".join(f"{key}={value}" for key, value in task.evaluator.query)
    for url in (
        f"data:text/html,<title>{path}</title><h1>Task complete</h1>",
        f"javascript:history.pushState(null, '', '{path}?{query}')",
        f"http://127.0.0.1:1{path}?{query}",
        f"http://example.com{path}?{query}",
    ):
        observation, _ = shop.reset(options={"task_id": task.id})
        _, _, _, _, info = shop.step(f"goto({json.dumps(url)})")
        assert "outside the sites of this task" in (info["error"] or ""), url
        assert shop.step(answer(""))[1] == 0.0, url


def test_a_url_task_needs_the_page_reached(envs):
    shop = envs("shop")
    assert reward_of(shop, "browse_brand_sorted/0", [answer("")]) == 0.0
    wiki = envs("wiki")
    # The contributions page of the user, without logging in as them.
    task = wiki.task("login_contributions/0")
    assert reward_of(wiki, task.id, [f'goto("/users/{task.params["username"]}")', answer("")]) == 0.0


# ---------------------------------------------------------------- server state
def test_state_changes_need_the_ui_and_count_once(envs):
    shop = envs("shop")
    task = shop.task("add_variant/0")
    # A GET to the form's endpoint changes nothing.
    in_cart = {(item.product_id, item.size, item.colour) for item in catalog().cart_of(task.user)}
    product_id, size, colour, quantity = next(row for row in task.evaluator.expected if row[:3] not in in_cart)
    query = f"size={size}&colour={colour}&quantity={quantity}"
    assert reward_of(shop, task.id, [f'goto("/product/{product_id}/cart?{query}")', answer("")]) == 0.0
    # The form submitted twice puts twice the quantity in the cart.
    steps = solution_without_answer(shop, task.id)
    assert reward_of(shop, task.id, [*steps, *steps, answer("")]) == 0.0


def blanket(env, task_id, folder, subject, *actions):
    """From the task's start: open ``folder``, page to the one listing ``subject``, tick every message there, then ``actions``."""
    observation, _ = env.reset(options={"task_id": task_id})

    def act(action):
        nonlocal observation
        observation, reward, _, _, info = env.step(action(observation["text"]) if callable(action) else action)
        assert info["error"] is None, info["error"]
        return reward

    act(lambda text: f"click({element_id(text, 'link', FOLDER_TITLES[folder])})")
    while f'checkbox "Select message: {subject}"' not in observation["text"]:
        act(lambda text: f"click({element_id(text, 'link', 'Next page')})")
    act(
        lambda text: " ".join(
            f"check({e['id']})"
            for e in elements(text)
            if e["role"] == "checkbox" and e["name"].startswith("Select message: ")
        )
    )
    return [act(action) for action in actions][-1]


@pytest.mark.parametrize("task_id, button", [("mark_unread/0", "Mark unread"), ("delete_subject/0", "Delete")])
def test_doing_it_to_every_message_is_not_doing_it_to_one(envs, task_id, button):
    mail = envs("mail")
    _, _, subject, _, _, folder = mail.task(task_id).params["candidate"]
    assert (
        blanket(mail, task_id, folder, subject, lambda text: f"click({element_id(text, 'button', button)})", answer(""))
        == 0.0
    )


def test_restoring_the_whole_trash_is_not_restoring_one_message(envs):
    mail = envs("mail")
    subject = mail.task("restore_from_trash/0").params["candidate"][2]
    move = (
        lambda text: f'select_option({element_id(text, "combobox", "Move selected to")}, "Inbox")',
        lambda text: f"click({element_id(text, 'button', 'Move')})",
        answer(""),
    )
    assert blanket(mail, "restore_from_trash/0", "trash", subject, *move) == 0.0


# ---------------------------------------------------------------- MiniWoB++
@pytest.mark.parametrize("task", ["click-button", "enter-text", "click-checkboxes", "login-user"])
def test_miniwob_reference_solution_scores_one(task):
    env = MiniWoBEnv(task)
    try:
        observation, _ = env.reset(seed=3)
        for action in MINIWOB_SOLUTIONS[task](observation["text"]):
            observation, reward, terminated, _, info = env.step(action)
        assert (reward, terminated, info["success"]) == (1.0, True, True)
    finally:
        env.close()


def test_miniwob_hacks_score_nothing():
    env = MiniWoBEnv("click-button")
    try:
        env.reset(seed=3)
        # No action runs script in the task page: the reward variables are out of reach.
        for url in (
            "javascript:WOB_DONE_GLOBAL=true;WOB_RAW_REWARD_GLOBAL=1;WOB_REWARD_GLOBAL=1",
            "data:text/html,<script>WOB_DONE_GLOBAL=true</script>",
        ):
            _, reward, terminated, _, info = env.step(f"goto({json.dumps(url)})")
            assert "outside the sites of this task" in info["error"] and not terminated and reward == 0.0
        # Solving an easier task on another page of the same server does not end this one.
        observation, *_ = env.step('goto("/miniwob/click-test.html")')
        observation, reward, terminated, _, _ = env.step(
            f"click({element_id(observation['text'], 'button', 'Click Me!')})"
        )
        assert not terminated and reward == 0.0
        # Giving up is not success.
        env.reset(seed=3)
        _, reward, terminated, _, info = env.step('answer("done")')
        assert terminated and reward == 0.0 and not info["success"]
    finally:
        env.close()
