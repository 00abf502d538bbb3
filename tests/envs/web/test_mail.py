"""Larkspur Mail (envs/web/apps/mail) on real Chromium: every template's reference solution succeeds, the evaluators are not vacuous, validation errors show on the page, the task counts, and forks that equal the original."""

import hashlib
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict

import pytest

from agentgym.envs.web.app_env import WebAppEnv, app_tasks
from agentgym.envs.web.apps.mail import tasks as mail_tasks
from agentgym.envs.web.observation import element_id
from agentgym.envs.web.tasks import run_solution

TASKS = app_tasks("mail")
BY_TEMPLATE = defaultdict(list)
for _task in TASKS.values():
    BY_TEMPLATE[_task.template].append(_task.id)
#: The first instance of every template in `make test`; the last too in `make test-sweeps`.
SOLVED = [ids[0] for ids in BY_TEMPLATE.values()] + [
    pytest.param(ids[-1], marks=pytest.mark.sweep) for ids in BY_TEMPLATE.values()
]
FIRST = next(iter(TASKS))


@pytest.fixture(scope="module")
def mail_env():
    env = WebAppEnv("mail")
    yield env
    env.close()


def test_counts_ids_and_goals():
    assert len(BY_TEMPLATE) >= 20 and len(TASKS) >= 100
    goals = [task.goal for task in TASKS.values()]
    assert len(set(goals)) == len(goals)
    for task_id, task in TASKS.items():
        assert task_id == task.id and task_id.rsplit("/", 1) == [task.template, task_id.rsplit("/", 1)[1]]
        assert task.user in {"alice", "bob", "carol", "dan"}
        last = task.solution[-1]  # the answer, or a function that reads it off the page
        assert callable(last) or last.startswith("answer(")
    assert [task.id for task in mail_tasks()] == list(TASKS)  # deterministic across calls


@pytest.mark.parametrize("task_id", SOLVED)
def test_reference_solution_succeeds(mail_env, task_id):
    observation, reward, terminated, info = run_solution(mail_env, task_id, TASKS[task_id].solution)
    assert (reward, terminated, info["success"]) == (1.0, True, True), (info.get("grade"), observation["text"])


def _fails(env, task_id, steps):
    observation, reward, terminated, info = run_solution(env, task_id, steps)
    return terminated and reward == 0.0 and not info["success"]


@pytest.mark.parametrize("template", ["sender_of_subject", "unread_from_count", "offsite_venue"])
def test_wrong_answer_fails(mail_env, template):
    task = TASKS[BY_TEMPLATE[template][0]]
    assert _fails(mail_env, task.id, (*task.solution[:-1], 'answer("Nobody, 77")'))


@pytest.mark.parametrize(
    "template", ["star_subject", "reply_latest_from", "archive_all_from", "change_signature", "nav_search_sender"]
)
def test_answering_without_doing_the_work_fails(mail_env, template):
    assert _fails(mail_env, BY_TEMPLATE[template][0], ('answer("")',))


def test_starring_the_wrong_message_fails(mail_env):
    task = TASKS[BY_TEMPLATE["star_subject"][0]]
    other = TASKS[next(i for i in BY_TEMPLATE["star_subject"] if TASKS[i].user == task.user and i != task.id)]
    # The other task's steps star another message in the same mailbox.
    assert _fails(mail_env, task.id, other.solution)


def _post(origin, path, user, fields):
    request = urllib.request.Request(
        origin + path, data=urllib.parse.urlencode(fields).encode(), headers={"Cookie": f"user={user}"}
    )
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, response.geturl(), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, path, error.read().decode()


def test_forms_show_validation_errors(mail_env):
    mail_env.reset(options={"task_id": FIRST})
    origin, db = mail_env.app.origin, mail_env.app.db
    sent = db.query("SELECT COUNT(*) FROM messages")[0][0]
    status, _, page = _post(origin, "/compose", "alice", {"to": "not an address", "subject": "", "body": "x"})
    assert status == 400 and "is not an email address or the name of one of your contacts" in page
    assert "The subject is empty." in page and db.query("SELECT COUNT(*) FROM messages")[0][0] == sent
    status, _, page = _post(origin, "/contacts/new", "alice", {"name": "", "email": "grace.kim@orbitlabs.test"})
    assert status == 400 and "Name is required." in page
    status, _, page = _post(origin, "/labels", "alice", {"name": "Inbox"})
    assert status == 400 and "is a folder name" in page
    status, _, page = _post(origin, "/settings", "bob", {"display_name": "", "signature": "", "page_size": "20"})
    assert status == 400 and "The display name cannot be empty." in page
    status, _, page = _post(origin, "/login", "", {"username": "alice", "password": "wrong"})
    assert status == 400 and "Wrong username or password." in page
    # Sending to a colleague delivers to their inbox; a contact's name is accepted as an address.
    status, url, _ = _post(origin, "/compose", "alice", {"to": "Bob Okafor", "subject": "Hello Bob", "body": "Hi"})
    assert status == 200 and urllib.parse.urlsplit(url).path == "/folder/sent"
    assert db.query("SELECT owner, folder, to_addrs FROM messages WHERE subject = 'Hello Bob' ORDER BY id") == [
        ("alice", "sent", "bob@larkspur.test"),
        ("bob", "inbox", "bob@larkspur.test"),
    ]


def test_login_sets_the_user_and_signed_out_visitors_go_to_the_login_page(mail_env):
    mail_env.reset(options={"task_id": FIRST})
    origin = mail_env.app.origin
    with urllib.request.urlopen(origin + "/folder/inbox") as response:
        assert urllib.parse.urlsplit(response.geturl()).path == "/login"
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    data = urllib.parse.urlencode({"username": "carol", "password": "carol-pw"}).encode()
    with browser.open(origin + "/login", data=data) as response:
        page = response.read().decode()
    assert urllib.parse.urlsplit(response.geturl()).path == "/folder/inbox" and "Signed in as carol" in page


def _digest(observation):
    return observation["text"], hashlib.sha256(observation["image"].tobytes()).hexdigest()


def test_fork_equals_the_original_and_has_its_own_server():
    env = WebAppEnv("mail", screenshot=True)
    try:
        task = TASKS[BY_TEMPLATE["reply_latest_from"][0]]
        steps = task.solution
        observation, _ = env.reset(options={"task_id": task.id})
        half = len(steps) // 2
        for step in steps[:half]:
            observation, *_, info = env.step(step(observation["text"]) if callable(step) else step)
            assert info["error"] is None
        with env.snapshot() as snapshot:
            fork = env.fork(snapshot)
        try:
            assert fork.fork_mode == "restore"  # a message page reloads to the same DOM
            action = steps[half](observation["text"])
            original, forked = env.step(action)[0], fork.step(action)[0]
            assert _digest(original) == _digest(forked)
            # Finish the reply in the fork only: the original's server never sees it.
            for step in steps[half + 1 : -1]:
                forked, *_ = fork.step(step(forked["text"]) if callable(step) else step)
            count = "SELECT COUNT(*) FROM messages WHERE folder = 'sent' AND sent_at >= '2026-01-05 09:00'"
            assert fork.app.db.query(count) == [(1,)] and env.app.db.query(count) == [(0,)]
            assert fork.step(steps[-1])[1] == 1.0 and env.step(steps[-1])[1] == 0.0
        finally:
            fork.close()
    finally:
        env.close()


def test_reply_all_and_forward_prefill_the_form(mail_env):
    task = TASKS[BY_TEMPLATE["reply_all"][0]]
    observation, _ = mail_env.reset(options={"task_id": task.id})
    for step in task.solution[:-4]:  # up to the open message
        observation, *_ = mail_env.step(step(observation["text"]) if callable(step) else step)
    text = mail_env.step(f"click({element_id(observation['text'], 'link', 'Reply all')})")[0]["text"]
    assert 'textbox "Cc" value=""' not in text and 'textbox "Subject" value="Re: ' in text
