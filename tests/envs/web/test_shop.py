"""The shop app on real Chromium: every template's reference solution succeeds, wrong answers and missing changes fail, the task set is large and distinct, forms validate, and forks are exact and independent."""

import re

import pytest

from agentgym.envs.web.app_env import WebAppEnv, app_tasks
from agentgym.envs.web.apps.shop.data import SHIPPING, catalog
from agentgym.envs.web.apps.shop.templates import (
    TEMPLATES,
    answer,
    checkout_steps,
    click,
    filters,
    open_category,
    open_product,
)
from agentgym.envs.web.observation import element_id
from agentgym.envs.web.tasks import AllOf, AnswerExact, AnswerIncludes, AnswerNumber, DbCheck, UrlMatch, run_solution

TASKS = app_tasks("shop")
BY_TEMPLATE = {}
for _task in TASKS.values():
    BY_TEMPLATE.setdefault(_task.template, []).append(_task.id)
# Every template's first instance in `make test`; its last one too in `make test-sweeps` (a reset opens a fresh
# browser context).
SAMPLED = [ids[0] for ids in BY_TEMPLATE.values()] + [
    pytest.param(ids[-1], marks=pytest.mark.sweep) for ids in BY_TEMPLATE.values() if len(ids) > 1
]


@pytest.fixture(scope="module")
def env():
    shop = WebAppEnv("shop")
    yield shop
    shop.close()


@pytest.mark.parametrize("task_id", SAMPLED)
def test_reference_solution_succeeds(env, task_id):
    task = TASKS[task_id]
    observation, reward, terminated, info = run_solution(env, task_id, task.solution)
    assert (reward, terminated, info["success"]) == (1.0, True, True), (info.get("grade"), observation["text"])


def test_task_set_is_large_and_distinct():
    assert len(TEMPLATES) >= 20 and set(BY_TEMPLATE) == set(TEMPLATES)
    assert len(TASKS) >= 100
    assert all(re.fullmatch(rf"{re.escape(task.template)}/\d+", task.id) for task in TASKS.values())
    assert len({task.goal for task in TASKS.values()}) == len(TASKS)
    assert all(
        isinstance(task.solution[-1], str) and task.solution[-1].startswith("answer(") for task in TASKS.values()
    )
    kinds = set().union(*(_evaluator_kinds(task.evaluator) for task in TASKS.values()))
    assert {AnswerExact, AnswerIncludes, AnswerNumber, UrlMatch, DbCheck, AllOf} <= kinds


def _evaluator_kinds(evaluator):
    inner = evaluator.evaluators if isinstance(evaluator, AllOf) else ()
    return {type(evaluator)}.union(*(_evaluator_kinds(part) for part in inner))


def test_wrong_answer_fails(env):
    task = TASKS["review_count/0"]
    *steps, _ = task.solution
    wrong = f'answer("{task.evaluator.value + 1:g}")'
    observation, reward, terminated, info = run_solution(env, task.id, (*steps, wrong))
    assert (reward, terminated, info["success"]) == (0.0, True, False)


@pytest.mark.parametrize("task_id", ["add_variant/0", "cancel_order/0", "set_default_address/0", "leave_review/0"])
def test_no_state_change_fails(env, task_id):
    observation, reward, terminated, info = run_solution(env, task_id, (answer(),))
    assert (reward, terminated, info["success"]) == (0.0, True, False)


def test_wrong_page_fails(env):
    task = TASKS["browse_brand_sorted/0"]
    slug = task.evaluator.path.rsplit("/", 1)[1]
    brand = dict(task.evaluator.query)["brand"]
    # The brand filtered but not sorted: not the page asked for.
    steps = open_category(slug) + filters(brand=brand) + (answer(),)
    observation, reward, terminated, info = run_solution(env, task.id, steps)
    assert f"/category/{slug}?brand=" in observation["text"]
    assert (reward, info["success"]) == (0.0, False)


def test_wrong_shipping_method_fails(env):
    task = TASKS["checkout/0"]
    _, _, method, payment, label, *_ = task.evaluator.evaluators[0].expected[0]
    other = next(key for key in SHIPPING if key != method)
    steps = (
        click("link", "Cart", exact=False),
        click("link", "Proceed to checkout"),
        *checkout_steps(label, other, payment),
        answer(),
    )
    observation, reward, terminated, info = run_solution(env, task.id, steps)
    assert "has been placed" in observation["text"]
    assert (reward, info["success"]) == (0.0, False)


def test_validation_errors_show_on_the_page(env):
    product = next(p for p in catalog().products if p.sizes)
    cart = "SELECT COUNT(*) FROM cart_items"
    observation, reward, terminated, info = run_solution(
        env, "add_variant/0", open_product(product) + (click("button", "Add to cart"),)
    )
    assert "Please choose a size." in observation["text"] and f"/product/{product.id}?error=size" in observation["text"]
    assert env.app.db.query(cart) == [(len(catalog().cart),)]
    observation, *_ = env.step('goto("/category/kitchen?min_price=abc")')
    assert "Minimum price must be a number" in observation["text"]


def test_listing_urls_are_canonical(env):
    env.reset(options={"task_id": "brand_count/0"})
    observation, *_ = env.step('goto("/search?q=  Running  SHOES &min_price=20.00&max_price=&sort=featured")')
    assert "URL: http://shop.local/search?q=running+shoes&min_price=20\n" in observation["text"]


def test_fork_is_exact_and_independent():
    original = WebAppEnv("shop", screenshot=True)
    child = None
    try:
        task = TASKS["add_variant/0"]
        user = task.user
        observation, _ = original.reset(options={"task_id": task.id})
        half = len(task.solution) // 2
        for step in task.solution[:half]:
            observation, *_ = original.step(step(observation["text"]) if callable(step) else step)
        snapshot = original.snapshot()
        child = original.fork(snapshot)
        snapshot.release()
        assert child.fork_mode == "restore"  # every page reloads exactly from its URL and the server state
        action = task.solution[half](observation["text"])
        left, *_ = original.step(action)
        right, *_ = child.step(action)
        assert left["text"] == right["text"]
        assert left["image"].tobytes() == right["image"].tobytes()

        cart = "SELECT product_id, size, colour, quantity FROM cart_items WHERE username = ? ORDER BY id"
        before = original.app.db.query(cart, (user,))
        observation = right
        for step in task.solution[half + 1 : -1]:  # the fork adds the item to its cart ...
            observation, *_ = child.step(step(observation["text"]) if callable(step) else step)
        assert len(child.app.db.query(cart, (user,))) == len(before) + 1
        assert original.app.db.query(cart, (user,)) == before  # ... which the original never sees
        observation, *_ = original.step(f"click({element_id(left['text'], 'link', 'Cart', exact=False)})")
        assert observation["text"].count("Remove ") == len(before)
    finally:
        if child is not None:
            child.close()
        original.close()
