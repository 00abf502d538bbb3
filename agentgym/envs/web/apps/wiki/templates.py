"""The wiki's task templates: goals from the seed, WebArena-style evaluators and scripted UI solutions.

Each template is a function returning its instances (``<template>/<n>``). Solutions look every
element up by role and name in the observation text (:func:`element_id`); answer steps first
check that the answer is visible on the page, so a solution proves the UI shows what the
evaluator expects.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

from agentgym.envs.web.apps.wiki.data import PROTECTION_LABELS, TAGS, TEAMS, TOOLS, Page, seed, slugify
from agentgym.envs.web.observation import element_id
from agentgym.envs.web.tasks import AllOf, AnswerExact, AnswerNumber, DbCheck, Evaluator, Step, UrlMatch, WebTask

INSTANCES = 10  # per template, where the seed offers that many distinct ones


# ---------------------------------------------------------------------- solution steps
def click(role: str, name: str) -> Step:
    return lambda text: f"click({element_id(text, role, name)})"


def fill(role: str, name: str, value: str) -> Step:
    return lambda text: f"fill({element_id(text, role, name)}, {json.dumps(value)})"


def select(name: str, option: str) -> Step:
    return lambda text: f"select_option({element_id(text, 'combobox', name)}, {json.dumps(option)})"


def check(role: str, name: str) -> Step:
    return lambda text: f"check({element_id(text, role, name)})"


def answer(value: str = "", seen: str | None = None) -> Step:
    """``answer(value)``, after checking that ``seen`` (by default the value itself) is on the page."""

    def step(text: str) -> str:
        expected = value if seen is None else seen
        if expected and expected not in text:
            raise AssertionError(f"{expected!r} is not on the page:\n{text}")
        return f"answer({json.dumps(value)})"

    return step


def open_page(title: str) -> tuple[Step, ...]:
    """Search for a page by its title in the header's search box and open it."""
    return (fill("searchbox", "Search pages", title), 'press("Enter")', click("link", title))


def edit_and_save(page: Page, *changes: Step) -> tuple[Step, ...]:
    return open_page(page.title) + (click("link", "Edit"), *changes, click("button", "Save page"), answer())


# ---------------------------------------------------------------------- picking instances
def _rng(template: str) -> random.Random:
    return random.Random(f"wiki/{template}")


def _pages(template: str, condition: Callable[[Page], bool] = lambda page: True, count: int = INSTANCES) -> list[Page]:
    candidates = [page for page in seed().live_pages() if condition(page)]
    return _rng(template).sample(candidates, min(count, len(candidates)))


def _users(role: str | None = None) -> list[str]:
    return [user.username for user in seed().users if role is None or user.role == role]


def _anyone(index: int) -> str:
    users = _users()
    return users[index % len(users)]


def _admin(index: int) -> str:
    admins = _users("admin")
    return admins[index % len(admins)]


def _editor_for(page: Page, index: int) -> str:
    """A user allowed to edit ``page`` (rotating, so instances are done by different people)."""
    pool = {"everyone": _users("reader") + _users("editor"), "editors": _users("editor"), "admins": _users("admin")}[
        page.protection
    ]
    return pool[index % len(pool)]


def _task(
    template: str,
    index: int,
    goal: str,
    evaluator: Evaluator,
    solution: tuple[Step, ...],
    user: str | None,
    start_path: str = "/",
    **params,
) -> WebTask:
    return WebTask(f"{template}/{index}", template, goal, evaluator, solution, start_path, user, params)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


# ---------------------------------------------------------------------- information seeking
def last_editor() -> list[WebTask]:
    readers = _users("reader")
    tasks = []
    for i, page in enumerate(_pages("last_editor")):
        author = page.revisions[-1].author
        goal = f"Who made the most recent edit to the wiki page “{page.title}”? Answer with their username."
        tasks.append(
            _task(
                "last_editor",
                i,
                goal,
                AnswerExact(author),
                open_page(page.title) + (answer(author, f"Last edited by {author} on"),),
                readers[i % len(readers)],
                page=page.title,
            )
        )
    return tasks


def page_creator() -> list[WebTask]:
    tasks = []
    for i, page in enumerate(_pages("page_creator", lambda page: len(page.revisions) > 2)):
        author = page.revisions[0].author
        tasks.append(
            _task(
                "page_creator",
                i,
                f"Who originally created the page “{page.title}”? Give the username.",
                AnswerExact(author),
                open_page(page.title) + (click("link", "History"), answer(author)),
                _anyone(i),
                page=page.title,
            )
        )
    return tasks


def category_count() -> list[WebTask]:
    data = seed()
    tasks = []
    for i, category in enumerate(data.categories):
        count = sum(page.category is category for page in data.live_pages())
        solution = (
            click("link", "Categories"),
            click("link", category.name),
            answer(str(count), f"{_plural(count, 'page')} in this category"),
        )
        tasks.append(
            _task(
                "category_count",
                i,
                f"How many pages are in the {category.name} category?",
                AnswerNumber(count),
                solution,
                _anyone(2 * i),
                category=category.name,
            )
        )
    return tasks


def tag_count() -> list[WebTask]:
    tasks = []
    for i, tag in enumerate(_rng("tag_count").sample(TAGS, 12)):
        count = sum(tag in page.tags for page in seed().live_pages())
        solution = (click("link", "Tags"), click("link", tag), answer(str(count), f"{_plural(count, 'page')} tagged"))
        tasks.append(
            _task(
                "tag_count",
                i,
                f"How many wiki pages carry the tag “{tag}”?",
                AnswerNumber(count),
                solution,
                _anyone(i),
                tag=tag,
            )
        )
    return tasks


def revision_count() -> list[WebTask]:
    tasks = []
    for i, page in enumerate(_pages("revision_count")):
        count = len(page.revisions)
        solution = open_page(page.title) + (click("link", "History"), answer(str(count), f"{count} revisions"))
        goal = f"How many revisions does the page “{page.title}” have in its history?"
        tasks.append(_task("revision_count", i, goal, AnswerNumber(count), solution, _anyone(i + 5), page=page.title))
    return tasks


def text_revision() -> list[WebTask]:
    def later_sentences(page: Page) -> list[tuple[str, int]]:
        return [(text, num) for text, num in page.revisions[-1].introduced.items() if num >= 2 and "[[" not in text]

    tasks = []
    for i, page in enumerate(_pages("text_revision", lambda page: bool(later_sentences(page)))):
        sentence, num = _rng(f"text_revision/{i}").choice(later_sentences(page))
        goal = (
            f"On the page “{page.title}”, which revision first added the sentence “{sentence}”? "
            "Answer with the revision number."
        )
        solution = open_page(page.title) + (
            click("link", "History"),
            click("link", f"Changes in revision {num}"),
            answer(str(num), f"Added: {sentence}"),
        )
        tasks.append(
            _task("text_revision", i, goal, AnswerNumber(num), solution, _anyone(i + 3), page=page.title, revision=num)
        )
    return tasks


def user_role() -> list[WebTask]:
    tasks = []
    for i, user in enumerate(_rng("user_role").sample(seed().users, INSTANCES)):
        goal = f"What role does the user {user.username} have on the wiki (reader, editor or admin)?"
        solution = (click("link", "Users"), click("link", user.username), answer(user.role, f'value="{user.role}"'))
        tasks.append(_task("user_role", i, goal, AnswerExact(user.role), solution, _admin(i), username=user.username))
    return tasks


def user_edits() -> list[WebTask]:
    data = seed()
    tasks = []
    for i, user in enumerate(_rng("user_edits").sample(data.users, INSTANCES)):
        count = sum(r.author == user.username for page in data.live_pages() for r in page.revisions)
        goal = (
            f"How many edits to existing pages has {user.name} ({user.username}) made, according to their "
            "contributions?"
        )
        solution = (
            click("link", "Users"),
            click("link", user.username),
            click("link", "Contributions"),
            answer(str(count), _plural(count, "edit")),
        )
        tasks.append(_task("user_edits", i, goal, AnswerNumber(count), solution, _admin(i), username=user.username))
    return tasks


def deleted_by() -> list[WebTask]:
    tasks = []
    for i, entry in enumerate(entry for entry in seed().audit if entry.action == "delete page"):
        goal = f"The page “{entry.target}” was deleted. Which admin deleted it? Give the username."
        solution = (
            click("link", "Audit log"),
            select("Action", "delete page"),
            click("button", "Filter"),
            answer(entry.actor, entry.target),
        )
        tasks.append(_task("deleted_by", i, goal, AnswerExact(entry.actor), solution, _admin(i), page=entry.target))
    return tasks


def search_count() -> list[WebTask]:
    tasks = []
    for i, tool in enumerate(_rng("search_count").sample(TOOLS, 12)):
        # The search matches titles and current text, case-insensitively (SQLite LIKE on ASCII).
        count = sum(tool.lower() in f"{page.title}\n{page.body}".lower() for page in seed().live_pages())
        solution = (
            fill("searchbox", "Search pages", tool),
            'press("Enter")',
            answer(str(count), f"{_plural(count, 'page')} found"),
        )
        tasks.append(
            _task(
                "search_count",
                i,
                f"How many wiki pages mention {tool}? Use the search.",
                AnswerNumber(count),
                solution,
                _anyone(i + 7),
                term=tool,
            )
        )
    return tasks


def _category_tag_pairs(template: str) -> list[tuple[str, str, list[Page]]]:
    """(category, tag, its pages newest first) for pairs with at least two live pages, sampled."""
    data = seed()
    pairs = []
    for category in data.categories:
        for tag in TAGS:
            pages = [page for page in data.live_pages() if page.category is category and tag in page.tags]
            if len(pages) >= 2:
                pairs.append((category.name, tag, sorted(pages, key=lambda page: page.updated, reverse=True)))
    return _rng(template).sample(pairs, min(INSTANCES, len(pairs)))


def newest_tagged() -> list[WebTask]:
    tasks = []
    for i, (category, tag, pages) in enumerate(_category_tag_pairs("newest_tagged")):
        goal = f"Among the {category} pages tagged “{tag}”, which one was edited most recently? Answer with its title."
        solution = (
            click("link", "All pages"),
            select("Category", category),
            select("Tag", tag),
            select("Sort", "Newest first"),
            click("button", "Apply"),
            answer(pages[0].title),
        )
        tasks.append(
            _task(
                "newest_tagged", i, goal, AnswerExact(pages[0].title), solution, _anyone(i), category=category, tag=tag
            )
        )
    return tasks


# ---------------------------------------------------------------------- navigation
def nav_history() -> list[WebTask]:
    return [
        _task(
            "nav_history",
            i,
            f"Open the revision history of “{page.title}”.",
            UrlMatch(f"/wiki/{page.slug}/history"),
            open_page(page.title) + (click("link", "History"), answer()),
            _anyone(i + 2),
            page=page.title,
        )
        for i, page in enumerate(_pages("nav_history"))
    ]


def nav_revision() -> list[WebTask]:
    tasks = []
    for i, page in enumerate(_pages("nav_revision", lambda page: len(page.revisions) > 2)):
        num = _rng(f"nav_revision/{i}").randint(1, len(page.revisions) - 1)
        goal = f"Show me how “{page.title}” looked in revision {num} (the whole old version, not the changes)."
        solution = open_page(page.title) + (click("link", "History"), click("link", f"Revision {num}"), answer())
        tasks.append(
            _task(
                "nav_revision",
                i,
                goal,
                UrlMatch(f"/wiki/{page.slug}/rev/{num}"),
                solution,
                _anyone(i + 4),
                page=page.title,
                revision=num,
            )
        )
    return tasks


def nav_category() -> list[WebTask]:
    categories = _rng("nav_category").sample(seed().categories, len(seed().categories))
    return [
        _task(
            "nav_category",
            i,
            f"Take me to the list of all pages in the {category.name} category.",
            UrlMatch(f"/category/{category.slug}"),
            (click("link", "Categories"), click("link", category.name), answer()),
            _anyone(i + 1),
            category=category.name,
        )
        for i, category in enumerate(categories)
    ]


def nav_tag() -> list[WebTask]:
    return [
        _task(
            "nav_tag",
            i,
            f"Show me every page tagged “{tag}”.",
            UrlMatch(f"/tag/{tag}"),
            (click("link", "Tags"), click("link", tag), answer()),
            _anyone(i + 6),
            tag=tag,
        )
        for i, tag in enumerate(_rng("nav_tag").sample(TAGS, 12))
    ]


def nav_contributions() -> list[WebTask]:
    readers = _users("reader")
    tasks = []
    for i, page in enumerate(_pages("nav_contributions", lambda page: len(page.revisions) > 1)):
        author = _rng(f"nav_contributions/{i}").choice(page.revisions).author
        goal = f"Someone called {author} edited “{page.title}”. Open the list of all of {author}'s contributions."
        solution = open_page(page.title) + (click("link", "History"), click("link", author), answer())
        tasks.append(
            _task(
                "nav_contributions",
                i,
                goal,
                UrlMatch(f"/users/{author}"),
                solution,
                readers[i % len(readers)],
                page=page.title,
                username=author,
            )
        )
    return tasks


def nav_search() -> list[WebTask]:
    terms = [f"{team} team" for team in TEAMS] + ["business days", "weekly", "escalations"]
    return [
        _task(
            "nav_search",
            i,
            f"Search the wiki for “{term}”.",
            UrlMatch("/pages", (("q", term),)),
            (fill("searchbox", "Search pages", term), 'press("Enter")', answer()),
            _anyone(i + 8),
            term=term,
        )
        for i, term in enumerate(_rng("nav_search").sample(terms, 12))
    ]


def nav_filtered() -> list[WebTask]:
    tasks = []
    for i, (category, tag, _) in enumerate(_category_tag_pairs("nav_filtered")):
        query = (("category", seed().category(category).slug), ("tag", tag), ("sort", "oldest"))
        solution = (
            click("link", "All pages"),
            select("Category", category),
            select("Tag", tag),
            select("Sort", "Oldest first"),
            click("button", "Apply"),
            answer(),
        )
        tasks.append(
            _task(
                "nav_filtered",
                i,
                f"List the {category} pages tagged “{tag}”, oldest first.",
                UrlMatch("/pages", query),
                solution,
                _anyone(i + 9),
                category=category,
                tag=tag,
            )
        )
    return tasks


# ---------------------------------------------------------------------- changing pages
_NEW_TITLES = (
    "Kafka Upgrade Notes",
    "Offsite Planning",
    "Intern Program",
    "Holiday Calendar",
    "Load Testing Guide",
    "Customer Advisory Board",
    "Office Plants",
    "Data Retention Policy",
    "Hackathon Rules",
    "Mentoring Circles",
    "Green IT Pledge",
    "Support Rotation",
)
_NEW_FACTS = (
    "The owner is {person}.",
    "Reviewed every {weekday} by the {team} team.",
    "Budget: {n} thousand dollars.",
    "Questions go to #{channel}.",
)


def create_page() -> list[WebTask]:
    data = seed()
    rng = _rng("create_page")
    tasks = []
    for i, title in enumerate(_NEW_TITLES):
        category = rng.choice(data.categories)
        fact = rng.choice(_NEW_FACTS).format(
            person=rng.choice(data.users).name,
            team=rng.choice(TEAMS),
            weekday=rng.choice(("Monday", "Wednesday", "Friday")),
            n=rng.randrange(5, 90),
            channel=slugify(title),
        )
        evaluator = DbCheck(
            "SELECT c.name, instr(p.body, ?) > 0, count(*) FROM pages p JOIN categories c "
            "ON c.id = p.category_id WHERE p.title = ? AND p.deleted = 0",
            ((category.name, 1, 1),),
            (fact, title),
            f"one page “{title}” in {category.name} whose text contains {fact!r}",
        )
        solution = (
            click("link", "New page"),
            fill("textbox", "Title", title),
            select("Category", category.name),
            fill("textbox", "Body", f"This page describes {title.lower()}.\n\n{fact}"),
            click("button", "Create page"),
            answer(),
        )
        goal = f"Create a wiki page titled “{title}” in the {category.name} category; its text must include “{fact}”"
        tasks.append(
            _task("create_page", i, goal, evaluator, solution, _anyone(3 * i + 3), title=title, category=category.name)
        )
    return tasks


def _tags_check(page: Page, tags: list[str]) -> DbCheck:
    return DbCheck(
        "SELECT tag FROM page_tags WHERE page_id = ? ORDER BY tag",
        tuple((tag,) for tag in sorted(tags)),
        (page.id,),
        f"“{page.title}” has exactly the tags {sorted(tags)}",
    )


def add_tag() -> list[WebTask]:
    tasks = []
    for i, page in enumerate(_pages("add_tag", lambda page: len(page.tags) < 3, 12)):
        tag = _rng(f"add_tag/{i}").choice([t for t in TAGS if t not in page.tags])
        tags = sorted(page.tags + [tag])
        goal = f"Add the tag “{tag}” to the page “{page.title}”, keeping its other tags."
        tasks.append(
            _task(
                "add_tag",
                i,
                goal,
                _tags_check(page, tags),
                edit_and_save(page, fill("textbox", "Tags", ", ".join(tags))),
                _editor_for(page, i),
                page=page.title,
                tag=tag,
            )
        )
    return tasks


def remove_tag() -> list[WebTask]:
    tasks = []
    for i, page in enumerate(_pages("remove_tag", lambda page: len(page.tags) > 1)):
        tag = _rng(f"remove_tag/{i}").choice(page.tags)
        tags = [t for t in page.tags if t != tag]
        goal = f"The page “{page.title}” should no longer be tagged “{tag}”. Remove that tag."
        tasks.append(
            _task(
                "remove_tag",
                i,
                goal,
                _tags_check(page, tags),
                edit_and_save(page, fill("textbox", "Tags", ", ".join(tags))),
                _editor_for(page, i + 1),
                page=page.title,
                tag=tag,
            )
        )
    return tasks


def move_category() -> list[WebTask]:
    tasks = []
    for i, page in enumerate(_pages("move_category")):
        category = _rng(f"move_category/{i}").choice([c for c in seed().categories if c is not page.category])
        evaluator = DbCheck(
            "SELECT category_id FROM pages WHERE id = ?",
            ((category.id,),),
            (page.id,),
            f"“{page.title}” is in {category.name}",
        )
        tasks.append(
            _task(
                "move_category",
                i,
                f"Move the page “{page.title}” into the {category.name} category.",
                evaluator,
                edit_and_save(page, select("Category", category.name)),
                _editor_for(page, i + 2),
                page=page.title,
                category=category.name,
            )
        )
    return tasks


_NEW_LINES = (
    "Last reviewed by the {team} team.",
    "See the {team} team for exceptions.",
    "This process is being revisited this quarter.",
    "Ping #{channel} before making changes.",
)


def _appended(page: Page, line: str) -> DbCheck:
    """The page keeps its text, ends with ``line``, and got exactly one new revision."""
    return DbCheck(
        "SELECT substr(body, 1, ?) = ?, substr(body, -?) = ?, "
        "(SELECT count(*) FROM revisions WHERE page_id = pages.id) FROM pages WHERE id = ?",
        ((1, 1, len(page.revisions) + 1),),
        (len(page.body), page.body, len(line), line, page.id),
        f"“{page.title}” keeps its text and ends with {line!r}, in one new revision",
    )


def append_text() -> list[WebTask]:
    tasks = []
    for i, page in enumerate(_pages("append_text")):
        line = _rng(f"append_text/{i}").choice(_NEW_LINES).format(team=TEAMS[i % len(TEAMS)], channel=page.slug)
        goal = f"Add the sentence “{line}” as a new paragraph at the end of “{page.title}”."
        tasks.append(
            _task(
                "append_text",
                i,
                goal,
                _appended(page, line),
                edit_and_save(page, fill("textbox", "Body", f"{page.body}\n\n{line}")),
                _editor_for(page, i + 3),
                page=page.title,
            )
        )
    return tasks


def edit_or_denied() -> list[WebTask]:
    """A reader tries to edit: allowed on open pages, refused (with the reason on the page) on protected ones."""
    readers = _users("reader")
    protected = _pages("edit_or_denied/protected", lambda page: page.protection != "everyone", 6)
    open_ = _pages("edit_or_denied/open", lambda page: page.protection == "everyone", 6)
    tasks = []
    for i, page in enumerate(protected + open_):
        line = f"Reviewed by the {TEAMS[i % len(TEAMS)]} team."
        goal = (
            f"Add the sentence “{line}” at the end of the page “{page.title}”. "
            "If the wiki does not allow you to edit it, answer “denied” instead."
        )
        reader = readers[i % len(readers)]
        if page.protection != "everyone":
            unchanged = DbCheck(
                "SELECT body FROM pages WHERE id = ?", ((page.body,),), (page.id,), f"“{page.title}” is unchanged"
            )
            # "denied" is right on half the tasks: it scores only with the wiki's record that it refused the edit.
            tried = DbCheck(
                "SELECT count(*) > 0 FROM refused_edits WHERE actor = ? AND page_id = ?",
                ((1,),),
                (reader, page.id),
                f"the wiki refused {reader} an edit of “{page.title}”",
            )
            evaluator: Evaluator = AllOf((AnswerExact("denied"), unchanged, tried))
            solution = open_page(page.title) + (click("link", "Edit"), answer("denied", "Permission denied"))
        else:
            evaluator = _appended(page, line)
            solution = edit_and_save(page, fill("textbox", "Body", f"{page.body}\n\n{line}"))
        tasks.append(
            _task(
                "edit_or_denied",
                i,
                goal,
                evaluator,
                solution,
                reader,
                page=page.title,
                allowed=page.protection == "everyone",
            )
        )
    return tasks


def revert() -> list[WebTask]:
    tasks = []
    for i, page in enumerate(_pages("revert", lambda page: len(page.revisions) > 2)):
        num = _rng(f"revert/{i}").randint(1, len(page.revisions) - 1)
        evaluator = DbCheck(
            "SELECT body = ?, (SELECT count(*) FROM revisions WHERE page_id = pages.id) FROM pages WHERE id = ?",
            ((1, len(page.revisions) + 1),),
            (page.revisions[num - 1].body, page.id),
            f"“{page.title}” has revision {num}'s text again, in one new revision",
        )
        solution = open_page(page.title) + (
            click("link", "History"),
            click("link", f"Revision {num}"),
            click("button", "Revert to this revision"),
            answer(),
        )
        tasks.append(
            _task(
                "revert",
                i,
                f"Revert the page “{page.title}” to revision {num}.",
                evaluator,
                solution,
                _editor_for(page, i + 4),
                page=page.title,
                revision=num,
            )
        )
    return tasks


_RENAMES = ("{title} Guide", "Legacy {title}", "{title} Overview", "{title} Handbook", "About {title}")


def rename() -> list[WebTask]:
    editors = _users("editor")
    tasks = []
    for i, page in enumerate(_pages("rename")):
        new = _RENAMES[i % len(_RENAMES)].format(title=page.title)
        evaluator = DbCheck(
            "SELECT title, slug, deleted FROM pages WHERE id = ?",
            ((new, slugify(new), 0),),
            (page.id,),
            f"the page is titled “{new}” at /wiki/{slugify(new)}",
        )
        solution = open_page(page.title) + (
            click("link", "Rename"),
            fill("textbox", "New title", new),
            click("button", "Rename page"),
            answer(),
        )
        # Renaming needs the editor role as well as permission to edit the page.
        user = _editor_for(page, i) if page.protection != "everyone" else editors[i % len(editors)]
        tasks.append(
            _task(
                "rename",
                i,
                f"Rename the page “{page.title}” to “{new}”.",
                evaluator,
                solution,
                user,
                page=page.title,
                new_title=new,
            )
        )
    return tasks


_REASONS = ("Duplicate of another page", "Out of date", "No longer relevant", "Created by mistake", "Merged elsewhere")


def delete_page() -> list[WebTask]:
    tasks = []
    for i, page in enumerate(_pages("delete_page")):
        reason = _REASONS[i % len(_REASONS)]
        evaluator = AllOf(
            (
                DbCheck("SELECT deleted FROM pages WHERE id = ?", ((1,),), (page.id,), f"“{page.title}” is deleted"),
                DbCheck(
                    "SELECT count(*) FROM audit WHERE action = 'delete page' AND target = ? AND detail = ?",
                    ((1,),),
                    (page.title, reason),
                    f"the deletion's reason is {reason!r}",
                ),
            )
        )
        solution = open_page(page.title) + (
            click("link", "Delete"),
            fill("textbox", "Reason", reason),
            click("button", "Delete page"),
            answer(),
        )
        goal = f"Delete the page “{page.title}”, giving “{reason}” as the reason."
        tasks.append(_task("delete_page", i, goal, evaluator, solution, _admin(i), page=page.title))
    return tasks


def _protection_tasks(template: str, level: str, goal: str) -> list[WebTask]:
    tasks = []
    for i, page in enumerate(_pages(template, lambda page: page.protection != level)):
        evaluator = DbCheck(
            "SELECT protection FROM pages WHERE id = ?",
            ((level,),),
            (page.id,),
            f"“{page.title}” can be edited by {level}",
        )
        solution = open_page(page.title) + (
            click("link", "Permissions"),
            check("radio", PROTECTION_LABELS[level]),
            click("button", "Save permissions"),
            answer(),
        )
        tasks.append(_task(template, i, goal.format(title=page.title), evaluator, solution, _admin(i), page=page.title))
    return tasks


def protect() -> list[WebTask]:
    return _protection_tasks("protect", "admins", "Protect the page “{title}” so that only admins can edit it.")


def unprotect() -> list[WebTask]:
    return _protection_tasks("unprotect", "everyone", "Open the page “{title}” up again so that everyone can edit it.")


def set_role() -> list[WebTask]:
    goals = {
        "editor": "Make {user} an editor.",
        "reader": "Demote {user} to a plain reader.",
        "admin": "Give {user} admin rights.",
    }
    tasks = []
    for i, user in enumerate(_rng("set_role").sample([u for u in seed().users if u.role != "admin"], 12)):
        role = "editor" if user.role == "reader" else ("reader" if i % 2 else "admin")
        evaluator = DbCheck(
            "SELECT role FROM users WHERE username = ?", ((role,),), (user.username,), f"{user.username} is {role}"
        )
        solution = (
            click("link", "Users"),
            click("link", user.username),
            select("Role", role),
            click("button", "Save role"),
            answer(),
        )
        tasks.append(
            _task(
                "set_role",
                i,
                goals[role].format(user=f"{user.name} ({user.username})"),
                evaluator,
                solution,
                _admin(i),
                username=user.username,
                role=role,
            )
        )
    return tasks


_NEW_CATEGORIES = (
    ("Legal", "Contracts, compliance and legal questions."),
    ("Facilities", "Offices, desks and meeting rooms."),
    ("Research", "Experiments and research notes."),
    ("Marketing", "Campaigns, brand and events."),
    ("Data Science", "Models, metrics and analysis."),
    ("IT Helpdesk", "Getting help with devices and accounts."),
    ("Partnerships", "Working with partner companies."),
    ("Events", "Company events and offsites."),
    ("Procurement", "Buying goods and services."),
    ("Localization", "Translating the product."),
)


def create_category() -> list[WebTask]:
    editors = _users("editor")
    tasks = []
    for i, (name, description) in enumerate(_NEW_CATEGORIES):
        evaluator = DbCheck(
            "SELECT name, description FROM categories WHERE slug = ?",
            ((name, description),),
            (slugify(name),),
            f"category {name!r} described as {description!r}",
        )
        solution = (
            click("link", "Categories"),
            fill("textbox", "Name", name),
            fill("textbox", "Description", description),
            click("button", "Create category"),
            answer(),
        )
        tasks.append(
            _task(
                "create_category",
                i,
                f"Create a new wiki category named “{name}” with the description “{description}”",
                evaluator,
                solution,
                editors[i % len(editors)],
                name=name,
            )
        )
    return tasks


def login_contributions() -> list[WebTask]:
    tasks = []
    for i, user in enumerate(_rng("login_contributions").sample(seed().users, INSTANCES)):
        evaluator = AllOf(
            (
                UrlMatch(f"/users/{user.username}"),
                DbCheck(
                    "SELECT count(*) FROM audit WHERE action = 'login' AND actor = ?",
                    ((1,),),
                    (user.username,),
                    f"{user.username} logged in once",
                ),
            )
        )
        solution = (
            fill("textbox", "Username", user.username),
            fill("textbox", "Password", user.password),
            click("button", "Log in"),
            click("link", "My contributions"),
            answer(),
        )
        goal = f"Log in as {user.username} (password: {user.password}) and open your own list of contributions."
        tasks.append(_task("login_contributions", i, goal, evaluator, solution, None, "/login", username=user.username))
    return tasks


TEMPLATES = (
    last_editor,
    page_creator,
    category_count,
    tag_count,
    revision_count,
    text_revision,
    user_role,
    user_edits,
    deleted_by,
    search_count,
    newest_tagged,
    nav_history,
    nav_revision,
    nav_category,
    nav_tag,
    nav_contributions,
    nav_search,
    nav_filtered,
    create_page,
    add_tag,
    remove_tag,
    move_category,
    append_text,
    edit_or_denied,
    revert,
    rename,
    delete_page,
    protect,
    unprotect,
    set_role,
    create_category,
    login_contributions,
)


def tasks() -> list[WebTask]:
    """Every wiki task, template by template (deterministic)."""
    return [task for template in TEMPLATES for task in template()]
