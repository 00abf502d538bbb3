"""The wiki app (envs/web/apps/wiki) on real Chromium: reference solutions, evaluators, errors on the page, forks.

Every template's first and last reference solutions succeed; wrong answers and skipped work fail;
permission and validation errors show on the page; task counts; a fork equals the original on the
next action (text and screenshot) and writes only its own database.
"""

import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict

import pytest

from agentgym.envs.web.app_env import WebAppEnv, app_tasks
from agentgym.envs.web.apps.wiki import tasks as wiki_tasks
from agentgym.envs.web.observation import element_id
from agentgym.envs.web.tasks import run_solution

TASKS = app_tasks("wiki")
BY_TEMPLATE = defaultdict(list)
for _task in TASKS.values():
    BY_TEMPLATE[_task.template].append(_task.id)
#: The first instance of every template in `make test`; the last (another seed's data) too in `make test-sweeps`.
SOLVED = [ids[0] for ids in BY_TEMPLATE.values()] + [
    pytest.param(ids[-1], marks=pytest.mark.sweep) for ids in BY_TEMPLATE.values() if len(ids) > 1
]


@pytest.fixture(scope="module")
def wiki_env():
    env = WebAppEnv("wiki")
    yield env
    env.close()


def test_counts_ids_and_goals():
    assert len(BY_TEMPLATE) >= 20 and len(TASKS) >= 100
    goals = [task.goal for task in TASKS.values()]
    assert len(set(goals)) == len(goals)
    for task_id, task in TASKS.items():
        template, number = task_id.rsplit("/", 1)
        assert template == task.template and number.isdigit()
        assert task.solution, task_id
    kinds = {type(task.evaluator).__name__ for task in TASKS.values()}
    assert {"AnswerExact", "AnswerNumber", "UrlMatch", "DbCheck", "AllOf"} <= kinds
    assert [task.id for task in wiki_tasks()] == list(TASKS)  # deterministic across calls


@pytest.mark.parametrize("task_id", SOLVED)
def test_reference_solution_succeeds(wiki_env, task_id):
    observation, reward, terminated, info = run_solution(wiki_env, task_id, TASKS[task_id].solution)
    assert (reward, terminated, info["success"]) == (1.0, True, True), (info.get("grade"), observation["text"])


def _fails(env, task_id, steps):
    observation, reward, terminated, info = run_solution(env, task_id, steps)
    return terminated and reward == 0.0 and not info["success"]


@pytest.mark.parametrize("template", ["last_editor", "category_count", "text_revision", "deleted_by"])
def test_wrong_answer_fails(wiki_env, template):
    task = TASKS[BY_TEMPLATE[template][0]]
    assert _fails(wiki_env, task.id, (*task.solution[:-1], 'answer("nobody, 999")'))


@pytest.mark.parametrize("template", ["add_tag", "revert", "protect", "set_role", "nav_history", "login_contributions"])
def test_answering_without_doing_the_work_fails(wiki_env, template):
    assert _fails(wiki_env, BY_TEMPLATE[template][0], ('answer("")',))


def test_reader_is_refused_on_a_protected_page(wiki_env):
    task = next(TASKS[i] for i in BY_TEMPLATE["edit_or_denied"] if not TASKS[i].params["allowed"])
    steps = task.solution[:-1]
    observation, *_ = run_solution(wiki_env, task.id, steps)
    assert "Permission denied" in observation["text"] and 'button "Save page"' not in observation["text"]
    # Posting the edit anyway (as a form from elsewhere would) is refused too, and the page is unchanged.
    slug = wiki_env.app.db.query("SELECT slug FROM pages WHERE title = ?", (task.params["page"],))[0][0]
    before = wiki_env.app.db.query("SELECT body FROM pages WHERE slug = ?", (slug,))
    request = urllib.request.Request(
        f"{wiki_env.app.origin}/wiki/{slug}/edit",
        headers={"Cookie": f"user={task.user}"},
        data=urllib.parse.urlencode({"title": "x", "body": "vandalised"}).encode(),
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 403
    assert wiki_env.app.db.query("SELECT body FROM pages WHERE slug = ?", (slug,)) == before
    assert _fails(wiki_env, task.id, (*steps, 'answer("")'))  # not saying "denied" is a failure


def test_forms_show_validation_errors(wiki_env):
    task = TASKS[BY_TEMPLATE["create_page"][0]]
    existing = task.solution  # New page, title, category, body, Create page
    taken = TASKS[BY_TEMPLATE["last_editor"][0]].params["page"]
    observation, *_ = run_solution(
        wiki_env,
        task.id,
        (
            existing[0],
            lambda text: f'fill({element_id(text, "textbox", "Title")}, "{taken}")',
            existing[2],
            existing[3],
            existing[4],
        ),
    )
    assert f"A page titled “{taken}” already exists." in observation["text"]
    assert wiki_env.app.db.query("SELECT count(*) FROM pages WHERE title = ?", (taken,)) == [(1,)]


def test_fork_matches_original_and_branches_server_state():
    env = WebAppEnv("wiki", screenshot=True)
    fork = None
    try:
        task = TASKS[BY_TEMPLATE["add_tag"][0]]
        steps = task.solution  # search, Enter, open page, Edit, fill tags, Save, answer
        observation, _ = env.reset(options={"task_id": task.id})
        for step in steps[:4]:
            observation, *_ = env.step(step(observation["text"]) if callable(step) else step)
        snapshot = env.snapshot()
        fork = env.fork(snapshot)
        action = steps[4](observation["text"])
        original = env.step(action)[0]
        forked = fork.step(action)[0]
        assert original["text"] == forked["text"]
        assert original["image"].tobytes() == forked["image"].tobytes()
        # Saving in the fork writes the fork's database only.
        observation, reward, terminated, _, info = fork.step(steps[5](forked["text"]))
        tags_sql = "SELECT tag FROM page_tags WHERE page_id = (SELECT id FROM pages WHERE title = ?)"
        fork_tags = fork.app.db.query(tags_sql, (task.params["page"],))
        original_tags = env.app.db.query(tags_sql, (task.params["page"],))
        assert (task.params["tag"],) in fork_tags and (task.params["tag"],) not in original_tags
        assert fork.step('answer("")')[1] == 1.0
        snapshot.release()
    finally:
        if fork is not None:
            fork.close()
        env.close()
