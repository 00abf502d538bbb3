"""The wiki app's pages and forms: pages, history, permissions, categories, tags, users, audit log and login.

Pages: the page list with search, filters, sorting and pagination; page view; history with old
revisions, diffs and revert; create, edit (title, body, category, tags), rename, delete and
permissions. Categories and tags have their own pages; users have contributions pages; admins
manage roles and read the audit log. Login is a form that sets the ``user`` cookie.

Roles decide what a user may do: readers edit pages open to everyone, editors also edit pages
restricted to editors and create categories, admins edit everything, delete pages, change page
permissions and user roles, and read the audit log. A refused action shows its reason on the page
(status 403) instead of the form. Every change is written to the audit log; every edit refused to a
signed-in user is recorded apart (``refused_edits``, shown nowhere), as a grader's evidence that it was tried.
"""

from __future__ import annotations

import difflib
import re
from urllib.parse import quote, urlencode

from aiohttp import web

from agentgym.envs.web.apps.wiki.data import AUDIT_ACTIONS, PROTECTION_LABELS, PROTECTIONS, ROLES, build, slugify
from agentgym.envs.web.site import WebApp, esc, form_value

PAGE_SIZE = 20
AUDIT_PAGE_SIZE = 25
SORTS = {
    "title": ("Title", "p.title COLLATE NOCASE"),
    "newest": ("Newest first", "p.updated DESC, p.title"),
    "oldest": ("Oldest first", "p.updated, p.title"),
}

_STYLE = """
header form { margin-left: auto; } .meta { color: #555; font-size: 90%; } .tags a { margin-right: 6px; }
.added { background: #dfd; } .removed { background: #fdd; } .missing { color: #b00; }
form.stack label { display: block; margin: 6px 0; } textarea { width: 640px; height: 220px; }
form.stack button { display: block; margin-top: 8px; }
nav.pager a { margin-right: 12px; } .actions a, .actions strong { margin-right: 10px; }
"""


def _can_edit(role: str | None, protection: str) -> bool:
    if role is None:
        return False
    return protection == "everyone" or role == "admin" or (protection == "editors" and role == "editor")


def _input(label: str, name: str, value: str = "", extra: str = "") -> str:
    """A labelled text field (the label is a separate element, so the field's name is just the label)."""
    return f'<label for=f-{name}>{label}</label> <input id=f-{name} name={name} value="{esc(value)}"{extra}>'


def _select(label: str, name: str, options: str) -> str:
    return f"<label for=f-{name}>{label}</label> <select id=f-{name} name={name}>{options}</select>"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _parse_tags(text: str) -> list[str]:
    return sorted({slugify(part) for part in text.split(",") if slugify(part)})


_WIKI_LINK = re.compile(r"\[\[([^\]]+)\]\]")


def _body_html(body: str, titles: set[str]) -> str:
    """Paragraphs, with ``[[Title]]`` as links (red when no such page exists)."""

    def link(match: re.Match) -> str:
        title = match.group(1)
        missing = "" if title.lower() in titles else " class=missing"
        return f'<a href="/wiki/{slugify(title)}"{missing}>{esc(title)}</a>'

    return "".join(
        "<p>" + _WIKI_LINK.sub(link, esc(paragraph)) + "</p>" for paragraph in body.split("\n\n") if paragraph.strip()
    )


class WikiApp(WebApp):
    """The company wiki (see the module docstring)."""

    name = "wiki"

    def build_database(self, db) -> None:
        build(db)

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/", self.home),
            web.get("/pages", self.page_list),
            web.get("/new", self.new_form),
            web.post("/new", self.new_submit),
            web.get("/wiki/{slug}", self.view),
            web.get("/wiki/{slug}/history", self.history),
            web.get("/wiki/{slug}/rev/{num:\\d+}", self.revision),
            web.get("/wiki/{slug}/diff/{num:\\d+}", self.diff),
            web.post("/wiki/{slug}/revert/{num:\\d+}", self.revert),
            web.get("/wiki/{slug}/edit", self.edit_form),
            web.post("/wiki/{slug}/edit", self.edit_submit),
            web.get("/wiki/{slug}/rename", self.rename_form),
            web.post("/wiki/{slug}/rename", self.rename_submit),
            web.get("/wiki/{slug}/delete", self.delete_form),
            web.post("/wiki/{slug}/delete", self.delete_submit),
            web.get("/wiki/{slug}/permissions", self.permissions_form),
            web.post("/wiki/{slug}/permissions", self.permissions_submit),
            web.get("/categories", self.categories),
            web.post("/categories", self.category_create),
            web.get("/category/{slug}", self.category),
            web.get("/tags", self.tags),
            web.get("/tag/{tag}", self.tag),
            web.get("/users/{username}", self.profile),
            web.get("/admin/users", self.admin_users),
            web.get("/admin/users/{username}", self.admin_user),
            web.post("/admin/users/{username}", self.admin_user_save),
            web.get("/admin/audit", self.audit_log),
            web.get("/login", self.login_form),
            web.post("/login", self.login_submit),
            web.get("/logout", self.logout),
        ]

    # ------------------------------------------------------------------ shared pieces
    def role(self, request: web.Request) -> str | None:
        user = self.user(request)
        rows = self.db.query("SELECT role FROM users WHERE username = ?", (user,)) if user else []
        return rows[0][0] if rows else None

    def render(self, request: web.Request, title: str, body: str, status: int = 200) -> web.Response:
        role = self.role(request)
        links = [
            ("/", "Home"),
            ("/pages", "All pages"),
            ("/categories", "Categories"),
            ("/tags", "Tags"),
            ("/new", "New page"),
        ]
        if role == "admin":
            links += [("/admin/users", "Users"), ("/admin/audit", "Audit log")]
        nav = "".join(f'<a href="{href}">{label}</a>' for href, label in links)
        nav += (
            '<form action="/pages" method=get role=search><input type=search name=q aria-label="Search pages" '
            'placeholder="Search pages"> <button>Search</button></form>'
        )
        if role:
            nav += f'<a href="/users/{quote(self.user(request))}">My contributions</a><a href="/logout">Log out</a>'
        else:
            nav += '<a href="/login">Log in</a>'
        return self.page(request, f"{title} - Wiki", body, nav=nav, status=status, style=_STYLE)

    def refuse(self, request: web.Request, title: str, message: str, back: str = "") -> web.Response:
        """A permission error, shown on the page where the form would be."""
        link = f'<p><a href="{back}">Back</a></p>' if back else ""
        return self.render(
            request, title, f"<h1>{esc(title)}</h1><div class=error role=alert>{esc(message)}</div>{link}", status=403
        )

    def audit(self, actor: str, action: str, target: str, detail: str = "") -> None:
        self.db.execute(
            "INSERT INTO audit (at, actor, action, target, detail) VALUES (?, ?, ?, ?, ?)",
            (self.now(), actor, action, target, detail),
        )

    def find_page(self, slug: str) -> tuple | None:
        """(id, slug, title, category_id, body, protection, updated) of the live page at ``slug``."""
        rows = self.db.query(
            "SELECT id, slug, title, category_id, body, protection, updated FROM pages WHERE slug = ? AND deleted = 0",
            (slug,),
        )
        return rows[0] if rows else None

    def page_or_404(self, request: web.Request, slug: str) -> tuple:
        page = self.find_page(slug)
        if page is None:
            redirect = self.db.query(
                "SELECT p.slug FROM redirects r JOIN pages p ON p.id = r.page_id WHERE r.slug = ? AND p.deleted = 0",
                (slug,),
            )
            if redirect:
                rest = request.path[len(f"/wiki/{slug}") :]
                self.redirect(f"/wiki/{redirect[0][0]}{rest}?from={quote(slug)}")
            missing = self.render(
                request,
                "No such page",
                (
                    f"<h1>No such page</h1><div class=error>There is no page at “{esc(slug)}”. "
                    f'It may have been deleted or renamed.</div><p><a href="/new">Create a page</a></p>'
                ),
                status=404,
            )
            raise web.HTTPNotFound(body=missing.body, content_type="text/html")
        return page

    def live_titles(self) -> set[str]:
        return {title.lower() for (title,) in self.db.query("SELECT title FROM pages WHERE deleted = 0")}

    def categories_options(self, selected: int | None) -> str:
        rows = self.db.query("SELECT id, name FROM categories ORDER BY name")
        return "".join(
            f'<option value="{cid}"{" selected" if cid == selected else ""}>{esc(name)}</option>' for cid, name in rows
        )

    def category_id(self, value: str) -> int | None:
        """The id of the category a form chose, or None if there is no such category."""
        rows = self.db.query("SELECT id FROM categories WHERE CAST(id AS TEXT) = ?", (value,))
        return rows[0][0] if rows else None

    def title_problem(self, title: str, page_id: int | None = None) -> str | None:
        if not title:
            return "Title is required."
        if len(title) > 80:
            return "Title must be at most 80 characters."
        if not slugify(title):
            return "Title must contain letters or digits."
        clash = self.db.query(
            "SELECT id FROM pages WHERE slug = ? AND deleted = 0 AND id != ?", (slugify(title), page_id or 0)
        )
        if clash:
            return f"A page titled “{title}” already exists."
        return None

    def page_tabs(self, slug: str, current: str) -> str:
        tabs = [
            ("", "Read"),
            ("/edit", "Edit"),
            ("/history", "History"),
            ("/rename", "Rename"),
            ("/permissions", "Permissions"),
            ("/delete", "Delete"),
        ]
        return (
            "<p class=actions>"
            + "".join(
                f"<strong>{label}</strong> " if suffix == current else f'<a href="/wiki/{slug}{suffix}">{label}</a> '
                for suffix, label in tabs
            )
            + "</p>"
        )

    # ------------------------------------------------------------------ home, list, search
    async def home(self, request: web.Request) -> web.Response:
        pages = self.db.query("SELECT count(*) FROM pages WHERE deleted = 0")[0][0]
        categories = self.db.query("SELECT count(*) FROM categories")[0][0]
        recent = self.db.query(
            "SELECT p.slug, p.title, r.num, r.author, r.created, r.summary FROM revisions r "
            "JOIN pages p ON p.id = r.page_id WHERE p.deleted = 0 "
            "ORDER BY r.created DESC, r.id DESC LIMIT 10"
        )
        items = "".join(
            f'<li><a href="/wiki/{slug}">{esc(title)}</a> <span class=meta>revision {num} by '
            f"{esc(author)} on {created}: {esc(summary)}</span></li>"
            for slug, title, num, author, created, summary in recent
        )
        body = (
            f"<h1>Company Wiki</h1><p>{pages} pages in {categories} categories.</p>"
            f"<h2>Recent changes</h2><ul>{items}</ul>"
        )
        return self.render(request, "Home", body)

    async def page_list(self, request: web.Request) -> web.Response:
        q = request.query.get("q", "").strip()
        category = request.query.get("category", "")
        tag = request.query.get("tag", "")
        sort = request.query.get("sort", "title")
        sort = sort if sort in SORTS else "title"
        where, params = ["p.deleted = 0"], []
        # The query is literal text: LIKE's wildcards in it are escaped.
        pattern = "%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        if q:
            where.append("(p.title LIKE ? ESCAPE '\\' OR p.body LIKE ? ESCAPE '\\')")
            params += [pattern, pattern]
        if category:
            where.append("c.slug = ?")
            params.append(category)
        if tag:
            where.append("EXISTS (SELECT 1 FROM page_tags t WHERE t.page_id = p.id AND t.tag = ?)")
            params.append(tag)
        # With a query, title matches come first: searching for a page's title finds it at the top.
        order = ("p.title LIKE ? ESCAPE '\\' DESC, " if q else "") + SORTS[sort][1]
        sql = f"FROM pages p JOIN categories c ON c.id = p.category_id WHERE {' AND '.join(where)}"
        total = self.db.query(f"SELECT count(*) {sql}", params)[0][0]
        pages = max(1, -(-total // PAGE_SIZE))
        try:
            number = min(max(1, int(request.query.get("page", "1"))), pages)
        except ValueError:
            number = 1
        rows = self.db.query(
            f"SELECT p.id, p.slug, p.title, c.slug, c.name, p.updated, "
            f"(SELECT author FROM revisions r WHERE r.page_id = p.id ORDER BY num DESC LIMIT 1) {sql} "
            f"ORDER BY {order} LIMIT ? OFFSET ?",
            params + ([pattern] if q else []) + [PAGE_SIZE, (number - 1) * PAGE_SIZE],
        )
        tags = self.tags_by_page([row[0] for row in rows])
        table = "".join(
            f'<tr><td><a href="/wiki/{slug}">{esc(title)}</a></td><td><a href="/category/{cslug}">{esc(cname)}</a></td>'
            f"<td>{esc(', '.join(tags.get(pid, [])))}</td><td>{updated} by {esc(author)}</td></tr>"
            for pid, slug, title, cslug, cname, updated, author in rows
        )
        cat_options = '<option value="">All categories</option>' + "".join(
            f'<option value="{cslug}"{" selected" if cslug == category else ""}>{esc(name)}</option>'
            for cslug, name in self.db.query("SELECT slug, name FROM categories ORDER BY name")
        )
        tag_options = '<option value="">All tags</option>' + "".join(
            f'<option value="{esc(t)}"{" selected" if t == tag else ""}>{esc(t)}</option>'
            for (t,) in self.db.query("SELECT DISTINCT tag FROM page_tags ORDER BY tag")
        )
        sort_options = "".join(
            f'<option value="{key}"{" selected" if key == sort else ""}>{label}</option>'
            for key, (label, _) in SORTS.items()
        )
        filters = (
            f'<form method=get action="/pages">{_input("Search", "q", q)} '
            f"{_select('Category', 'category', cat_options)} {_select('Tag', 'tag', tag_options)} "
            f"{_select('Sort', 'sort', sort_options)} <button>Apply</button></form>"
        )
        query = {k: v for k, v in (("q", q), ("category", category), ("tag", tag), ("sort", sort)) if v}
        pager = []
        if number > 1:
            pager.append(f'<a href="/pages?{urlencode({**query, "page": number - 1})}">Previous page</a>')
        if number < pages:
            pager.append(f'<a href="/pages?{urlencode({**query, "page": number + 1})}">Next page</a>')
        heading = f"Search results for “{esc(q)}”" if q else "All pages"
        found = _plural(total, "page") + (" found" if q else "")
        deleted = request.query.get("deleted")
        flash = f"<div class=flash role=status>“{esc(deleted)}” was deleted.</div>" if deleted else ""
        body = (
            f"<h1>{heading}</h1>{flash}{filters}<p>{found} · page {number} of {pages}</p>"
            f"<table><tr><th>Title</th><th>Category</th><th>Tags</th><th>Last edited</th></tr>{table}</table>"
            f"<nav class=pager>{''.join(pager)}</nav>"
        )
        return self.render(request, "Search" if q else "All pages", body)

    def tags_by_page(self, ids: list[int]) -> dict[int, list[str]]:
        if not ids:
            return {}
        rows = self.db.query(
            f"SELECT page_id, tag FROM page_tags WHERE page_id IN ({','.join('?' * len(ids))}) ORDER BY tag", ids
        )
        found: dict[int, list[str]] = {}
        for pid, tag in rows:
            found.setdefault(pid, []).append(tag)
        return found

    # ------------------------------------------------------------------ reading a page
    async def view(self, request: web.Request) -> web.Response:
        pid, slug, title, cid, body, protection, updated = self.page_or_404(request, request.match_info["slug"])
        category = self.db.query("SELECT slug, name FROM categories WHERE id = ?", (cid,))[0]
        num, author = self.db.query(
            "SELECT num, author FROM revisions WHERE page_id = ? ORDER BY num DESC LIMIT 1", (pid,)
        )[0]
        tags = self.tags_by_page([pid]).get(pid, [])
        notes = ""
        if request.query.get("from"):
            notes += f"<p class=meta>(Redirected from {esc(request.query['from'])})</p>"
        if request.query.get("saved"):
            notes += "<div class=flash role=status>Your changes were saved.</div>"
        tag_links = "".join(f'<a href="/tag/{quote(t)}">{esc(t)}</a>' for t in tags) or "none"
        html = (
            f"<h1>{esc(title)}</h1>{notes}{self.page_tabs(slug, '')}"
            f'<p class=meta>Category: <a href="/category/{category[0]}">{esc(category[1])}</a> · '
            f"Editing: {PROTECTION_LABELS[protection]}</p>"
            f"<p class=meta>Last edited by {esc(author)} on {updated} (revision {num})</p>"
            f"<article>{_body_html(body, self.live_titles())}</article>"
            f"<p class=tags>Tags: {tag_links}</p>"
        )
        return self.render(request, title, html)

    async def history(self, request: web.Request) -> web.Response:
        pid, slug, title, *_ = self.page_or_404(request, request.match_info["slug"])
        rows = self.db.query(
            "SELECT num, created, author, summary FROM revisions WHERE page_id = ? ORDER BY num DESC", (pid,)
        )
        table = "".join(
            f'<tr><td><a href="/wiki/{slug}/rev/{num}">Revision {num}</a></td><td>{created}</td>'
            f'<td><a href="/users/{author}">{esc(author)}</a></td><td>{esc(summary)}</td>'
            f'<td><a href="/wiki/{slug}/diff/{num}" aria-label="Changes in revision {num}">diff</a></td></tr>'
            for num, created, author, summary in rows
        )
        html = (
            f"<h1>History of {esc(title)}</h1>{self.page_tabs(slug, '/history')}"
            f"<p>{_plural(len(rows), 'revision')}</p>"
            f"<table><tr><th>Revision</th><th>Date</th><th>Author</th><th>Summary</th><th>Changes</th></tr>"
            f"{table}</table>"
        )
        return self.render(request, f"History of {title}", html)

    def revision_row(self, pid: int, num: int) -> tuple | None:
        rows = self.db.query(
            "SELECT body, author, created, summary FROM revisions WHERE page_id = ? AND num = ?", (pid, num)
        )
        return rows[0] if rows else None

    async def revision(self, request: web.Request) -> web.Response:
        pid, slug, title, *_ = self.page_or_404(request, request.match_info["slug"])
        num = int(request.match_info["num"])
        row = self.revision_row(pid, num)
        if row is None:
            raise web.HTTPNotFound(text=f"{title} has no revision {num}")
        body, author, created, summary = row
        latest = self.db.query("SELECT max(num) FROM revisions WHERE page_id = ?", (pid,))[0][0]
        links = [f'<a href="/wiki/{slug}/history">Back to history</a>']
        if num > 1:
            links.append(f'<a href="/wiki/{slug}/rev/{num - 1}">Previous revision</a>')
        if num < latest:
            links.append(f'<a href="/wiki/{slug}/rev/{num + 1}">Next revision</a>')
        revert = (
            "<p class=meta>This is the current revision.</p>"
            if num == latest
            else f'<form method=post action="/wiki/{slug}/revert/{num}"><button>Revert to this revision</button></form>'
        )
        html = (
            f"<h1>{esc(title)}: revision {num}</h1>"
            f"<p class=meta>By {esc(author)} on {created} · {esc(summary)}</p>"
            f"<p class=actions>{' '.join(links)}</p>{revert}"
            f"<article>{_body_html(body, self.live_titles())}</article>"
        )
        return self.render(request, f"{title} (revision {num})", html)

    async def diff(self, request: web.Request) -> web.Response:
        pid, slug, title, *_ = self.page_or_404(request, request.match_info["slug"])
        num = int(request.match_info["num"])
        row = self.revision_row(pid, num)
        if row is None:
            raise web.HTTPNotFound(text=f"{title} has no revision {num}")
        new = row[0].split("\n\n")
        old = self.revision_row(pid, num - 1)[0].split("\n\n") if num > 1 else []
        lines = []
        for op, a1, a2, b1, b2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
            if op == "equal":
                continue
            lines += [f"<li class=removed>Removed: {esc(text)}</li>" for text in old[a1:a2]]
            lines += [f"<li class=added>Added: {esc(text)}</li>" for text in new[b1:b2]]
        changes = f"<ul>{''.join(lines)}</ul>" if lines else "<p>No changes to the text.</p>"
        html = (
            f"<h1>{esc(title)}: changes in revision {num}</h1>"
            f"<p class=meta>By {esc(row[1])} on {row[2]} · {esc(row[3])}</p>"
            f'<p class=actions><a href="/wiki/{slug}/history">Back to history</a> '
            f'<a href="/wiki/{slug}/rev/{num}">View revision {num}</a></p>{changes}'
        )
        return self.render(request, f"{title} (changes in revision {num})", html)

    # ------------------------------------------------------------------ changing a page
    def edit_refusal(
        self, request: web.Request, page_id: int, slug: str, title: str, protection: str
    ) -> web.Response | None:
        role = self.role(request)
        if role is None:
            return self.refuse(request, f"Edit {title}", "You must log in to edit pages.", f"/wiki/{slug}")
        if not _can_edit(role, protection):
            self.db.execute(
                "INSERT INTO refused_edits (at, actor, page_id) VALUES (?, ?, ?)",
                (self.now(), self.user(request), page_id),
            )
            who = PROTECTION_LABELS[protection].lower()
            return self.refuse(
                request,
                f"Edit {title}",
                f"Permission denied: this page is protected and only {who} can edit it. Your role is {role}.",
                f"/wiki/{slug}",
            )
        return None

    def page_form(
        self,
        action: str,
        button: str,
        title: str,
        category: int | None,
        tags: str,
        body: str,
        summary: str,
        error: str = "",
    ) -> str:
        error_html = f"<div class=error role=alert>{esc(error)}</div>" if error else ""
        return (
            f'{error_html}<form class=stack method=post action="{action}">'
            f"{_input('Title', 'title', title)}{_select('Category', 'category', self.categories_options(category))}"
            f"{_input('Tags', 'tags', tags, ' placeholder=comma-separated')}"
            f"<label for=f-body>Body</label> <textarea id=f-body name=body>{esc(body)}</textarea>"
            f"{_input('Edit summary', 'summary', summary)}"
            f"<button>{button}</button></form>"
        )

    async def edit_form(self, request: web.Request) -> web.Response:
        pid, slug, title, cid, body, protection, _ = self.page_or_404(request, request.match_info["slug"])
        refusal = self.edit_refusal(request, pid, slug, title, protection)
        if refusal:
            return refusal
        tags = ", ".join(self.tags_by_page([pid]).get(pid, []))
        html = f"<h1>Edit {esc(title)}</h1>{self.page_tabs(slug, '/edit')}" + self.page_form(
            f"/wiki/{slug}/edit", "Save page", title, cid, tags, body, ""
        )
        return self.render(request, f"Edit {title}", html)

    async def edit_submit(self, request: web.Request) -> web.Response:
        pid, slug, title, cid, body, protection, _ = self.page_or_404(request, request.match_info["slug"])
        refusal = self.edit_refusal(request, pid, slug, title, protection)
        if refusal:
            return refusal
        form = await request.post()
        new_title = form_value(form, "title")
        new_body = form_value(form, "body").replace("\r\n", "\n")
        tags_text = form_value(form, "tags")
        summary = form_value(form, "summary")
        new_cid = self.category_id(form_value(form, "category"))
        error = (
            self.title_problem(new_title, pid)
            or (None if new_cid else "Choose a category.")
            or (None if new_body else "The page body cannot be empty.")
        )
        if error:
            html = f"<h1>Edit {esc(title)}</h1>{self.page_tabs(slug, '/edit')}" + self.page_form(
                f"/wiki/{slug}/edit", "Save page", new_title, new_cid, tags_text, new_body, summary, error
            )
            return self.render(request, f"Edit {title}", html)
        old_tags = self.tags_by_page([pid]).get(pid, [])
        new_tags = _parse_tags(tags_text)
        if (new_title, new_body, new_cid, new_tags) == (title, body, cid, old_tags):
            self.redirect(f"/wiki/{slug}")
        actor = self.user(request)
        if new_title != title:
            slug = self.retitle(pid, slug, title, new_title, actor, redirect=True)
        num = self.add_revision(pid, new_body, actor, summary or "Edited page")
        self.db.execute("UPDATE pages SET category_id = ? WHERE id = ?", (new_cid, pid))
        self.db.execute("DELETE FROM page_tags WHERE page_id = ?", (pid,))
        self.db.conn.executemany("INSERT INTO page_tags VALUES (?, ?)", [(pid, tag) for tag in new_tags])
        self.audit(actor, "edit page", new_title, f"revision {num}: {summary or 'Edited page'}")
        self.redirect(f"/wiki/{slug}?saved=1")

    def add_revision(self, pid: int, body: str, actor: str, summary: str) -> int:
        """Save ``body`` as the page's next revision (and its current text); returns the revision number."""
        now = self.now()
        num = self.db.query("SELECT coalesce(max(num), 0) + 1 FROM revisions WHERE page_id = ?", (pid,))[0][0]
        self.db.execute(
            "INSERT INTO revisions (page_id, num, body, author, created, summary) VALUES (?, ?, ?, ?, ?, ?)",
            (pid, num, body, actor, now, summary),
        )
        self.db.execute("UPDATE pages SET body = ?, updated = ? WHERE id = ?", (body, now, pid))
        return num

    def retitle(self, pid: int, slug: str, title: str, new_title: str, actor: str, redirect: bool) -> str:
        new_slug = slugify(new_title)
        self.db.execute("UPDATE pages SET title = ?, slug = ? WHERE id = ?", (new_title, new_slug, pid))
        self.db.execute("DELETE FROM redirects WHERE slug = ?", (new_slug,))
        if redirect and new_slug != slug:
            self.db.execute("INSERT OR REPLACE INTO redirects VALUES (?, ?)", (slug, pid))
        self.audit(actor, "rename page", title, f"to {new_title}")
        return new_slug

    async def revert(self, request: web.Request) -> web.Response:
        pid, slug, title, cid, body, protection, _ = self.page_or_404(request, request.match_info["slug"])
        refusal = self.edit_refusal(request, pid, slug, title, protection)
        if refusal:
            return refusal
        num = int(request.match_info["num"])
        row = self.revision_row(pid, num)
        if row is None:
            raise web.HTTPNotFound(text=f"{title} has no revision {num}")
        actor, summary = self.user(request), f"Reverted to revision {num}"
        latest = self.add_revision(pid, row[0], actor, summary)
        self.audit(actor, "revert page", title, f"revision {latest}: {summary}")
        self.redirect(f"/wiki/{slug}?saved=1")

    async def new_form(self, request: web.Request) -> web.Response:
        if self.role(request) is None:
            return self.refuse(request, "New page", "You must log in to create pages.", "/login")
        category = self.db.query("SELECT id FROM categories WHERE slug = ?", (request.query.get("category", ""),))
        html = "<h1>New page</h1>" + self.page_form(
            "/new", "Create page", "", category[0][0] if category else None, "", "", ""
        )
        return self.render(request, "New page", html)

    async def new_submit(self, request: web.Request) -> web.Response:
        if self.role(request) is None:
            return self.refuse(request, "New page", "You must log in to create pages.", "/login")
        form = await request.post()
        title = form_value(form, "title")
        body = form_value(form, "body").replace("\r\n", "\n")
        tags_text = form_value(form, "tags")
        summary = form_value(form, "summary")
        cid = self.category_id(form_value(form, "category"))
        error = (
            self.title_problem(title)
            or (None if cid else "Choose a category.")
            or (None if body else "The page body cannot be empty.")
        )
        if error:
            html = "<h1>New page</h1>" + self.page_form(
                "/new", "Create page", title, cid, tags_text, body, summary, error
            )
            return self.render(request, "New page", html)
        actor, slug = self.user(request), slugify(title)
        # A new page is open to everyone; its text and time come with its first revision.
        pid = self.db.execute(
            "INSERT INTO pages (slug, title, category_id, body, protection, deleted, updated) "
            "VALUES (?, ?, ?, '', 'everyone', 0, '')",
            (slug, title, cid),
        ).lastrowid
        self.db.execute("DELETE FROM redirects WHERE slug = ?", (slug,))
        self.add_revision(pid, body, actor, summary or "Created page")
        for tag in _parse_tags(tags_text):
            self.db.execute("INSERT INTO page_tags VALUES (?, ?)", (pid, tag))
        self.audit(actor, "create page", title, f"revision 1: {summary or 'Created page'}")
        self.redirect(f"/wiki/{slug}?saved=1")

    async def rename_form(self, request: web.Request, error: str = "", value: str = "") -> web.Response:
        pid, slug, title, cid, body, protection, _ = self.page_or_404(request, request.match_info["slug"])
        role = self.role(request)
        if role not in ("editor", "admin") or not _can_edit(role, protection):
            return self.refuse(
                request,
                f"Rename {title}",
                "Permission denied: renaming needs the editor or admin role and permission to edit the page.",
                f"/wiki/{slug}",
            )
        error_html = f"<div class=error role=alert>{esc(error)}</div>" if error else ""
        html = (
            f"<h1>Rename {esc(title)}</h1>{self.page_tabs(slug, '/rename')}{error_html}"
            f'<form class=stack method=post action="/wiki/{slug}/rename">'
            f"{_input('New title', 'title', value or title)}"
            f"<label><input type=checkbox name=redirect checked> Leave a redirect from the old title</label>"
            f"<button>Rename page</button></form>"
        )
        return self.render(request, f"Rename {title}", html)

    async def rename_submit(self, request: web.Request) -> web.Response:
        pid, slug, title, cid, body, protection, _ = self.page_or_404(request, request.match_info["slug"])
        role = self.role(request)
        if role not in ("editor", "admin") or not _can_edit(role, protection):
            return await self.rename_form(request)
        form = await request.post()
        new_title = form_value(form, "title")
        if new_title == title:
            return await self.rename_form(request, "The new title is the same as the old one.", new_title)
        error = self.title_problem(new_title, pid)
        if error:
            return await self.rename_form(request, error, new_title)
        new_slug = self.retitle(pid, slug, title, new_title, self.user(request), redirect="redirect" in form)
        self.redirect(f"/wiki/{new_slug}")

    async def delete_form(self, request: web.Request) -> web.Response:
        pid, slug, title, *_ = self.page_or_404(request, request.match_info["slug"])
        if self.role(request) != "admin":
            return self.refuse(
                request, f"Delete {title}", "Permission denied: only admins can delete pages.", f"/wiki/{slug}"
            )
        html = (
            f"<h1>Delete {esc(title)}</h1>{self.page_tabs(slug, '/delete')}"
            f"<p>Deleting removes the page and its history from the wiki.</p>"
            f'<form class=stack method=post action="/wiki/{slug}/delete">{_input("Reason", "reason")}'
            f"<button>Delete page</button></form>"
        )
        return self.render(request, f"Delete {title}", html)

    async def delete_submit(self, request: web.Request) -> web.Response:
        pid, slug, title, *_ = self.page_or_404(request, request.match_info["slug"])
        if self.role(request) != "admin":
            return await self.delete_form(request)
        form = await request.post()
        self.db.execute("UPDATE pages SET deleted = 1 WHERE id = ?", (pid,))
        self.db.execute("DELETE FROM redirects WHERE page_id = ?", (pid,))
        self.audit(self.user(request), "delete page", title, form_value(form, "reason") or "No reason given")
        self.redirect(f"/pages?deleted={quote(title)}")

    async def permissions_form(self, request: web.Request) -> web.Response:
        pid, slug, title, cid, body, protection, _ = self.page_or_404(request, request.match_info["slug"])
        current = f"<p>Who can edit this page now: {PROTECTION_LABELS[protection]}</p>"
        if self.role(request) != "admin":
            return self.refuse(
                request,
                f"Permissions of {title}",
                f"Permission denied: only admins can change who may edit a page. "
                f"Currently {PROTECTION_LABELS[protection].lower()} can edit it.",
                f"/wiki/{slug}",
            )
        radios = "".join(
            f"<label><input type=radio name=protection value={level}"
            f"{' checked' if level == protection else ''}> {PROTECTION_LABELS[level]}</label>"
            for level in PROTECTIONS
        )
        html = (
            f"<h1>Permissions of {esc(title)}</h1>{self.page_tabs(slug, '/permissions')}{current}"
            f'<form class=stack method=post action="/wiki/{slug}/permissions"><fieldset><legend>Who can edit'
            f"</legend>{radios}</fieldset><button>Save permissions</button></form>"
        )
        return self.render(request, f"Permissions of {title}", html)

    async def permissions_submit(self, request: web.Request) -> web.Response:
        pid, slug, title, cid, body, protection, _ = self.page_or_404(request, request.match_info["slug"])
        if self.role(request) != "admin":
            return await self.permissions_form(request)
        level = form_value(await request.post(), "protection")
        if level in PROTECTIONS and level != protection:
            self.db.execute("UPDATE pages SET protection = ? WHERE id = ?", (level, pid))
            self.audit(self.user(request), "protect page", title, f"{protection} -> {level}")
        self.redirect(f"/wiki/{slug}")

    # ------------------------------------------------------------------ categories and tags
    async def categories(
        self, request: web.Request, error: str = "", name: str = "", description: str = ""
    ) -> web.Response:
        rows = self.db.query(
            "SELECT c.slug, c.name, c.description, "
            "(SELECT count(*) FROM pages p WHERE p.category_id = c.id AND p.deleted = 0) "
            "FROM categories c ORDER BY c.name"
        )
        table = "".join(
            f'<tr><td><a href="/category/{slug}">{esc(cname)}</a></td><td>{esc(desc)}</td><td>{count} pages</td></tr>'
            for slug, cname, desc, count in rows
        )
        if self.role(request) in ("editor", "admin"):
            error_html = f"<div class=error role=alert>{esc(error)}</div>" if error else ""
            create = (
                f"<h2>New category</h2>{error_html}<form class=stack method=post action=/categories>"
                f"{_input('Name', 'name', name)}{_input('Description', 'description', description)}"
                f"<button>Create category</button></form>"
            )
        else:
            create = "<p class=meta>Editors and admins can create categories.</p>"
        html = (
            f"<h1>Categories</h1><table><tr><th>Category</th><th>Description</th><th>Pages</th></tr>{table}</table>"
            f"{create}"
        )
        return self.render(request, "Categories", html)

    async def category_create(self, request: web.Request) -> web.Response:
        if self.role(request) not in ("editor", "admin"):
            return self.refuse(
                request,
                "New category",
                "Permission denied: only editors and admins can create categories.",
                "/categories",
            )
        form = await request.post()
        name, description = form_value(form, "name"), form_value(form, "description")
        error = None
        if not name or not slugify(name):
            error = "Category name is required."
        elif self.db.query("SELECT 1 FROM categories WHERE slug = ?", (slugify(name),)):
            error = f"A category named “{name}” already exists."
        if error:
            return await self.categories(request, error, name, description)
        self.db.execute(
            "INSERT INTO categories (slug, name, description) VALUES (?, ?, ?)", (slugify(name), name, description)
        )
        self.audit(self.user(request), "create category", name, description)
        self.redirect(f"/category/{slugify(name)}")

    async def category(self, request: web.Request) -> web.Response:
        rows = self.db.query(
            "SELECT id, slug, name, description FROM categories WHERE slug = ?", (request.match_info["slug"],)
        )
        if not rows:
            raise web.HTTPNotFound(text="No such category")
        cid, slug, name, description = rows[0]
        pages = self.db.query(
            "SELECT slug, title, updated FROM pages WHERE category_id = ? AND deleted = 0 "
            "ORDER BY title COLLATE NOCASE",
            (cid,),
        )
        items = "".join(
            f'<li><a href="/wiki/{pslug}">{esc(title)}</a> <span class=meta>updated {updated}</span></li>'
            for pslug, title, updated in pages
        )
        html = (
            f"<h1>Category: {esc(name)}</h1><p>{esc(description)}</p>"
            f"<p>{_plural(len(pages), 'page')} in this category</p><ul>{items}</ul>"
            f'<p><a href="/new?category={slug}">New page in this category</a></p>'
        )
        return self.render(request, f"Category: {name}", html)

    async def tags(self, request: web.Request) -> web.Response:
        rows = self.db.query(
            "SELECT t.tag, count(*) FROM page_tags t JOIN pages p ON p.id = t.page_id "
            "WHERE p.deleted = 0 GROUP BY t.tag ORDER BY t.tag"
        )
        items = "".join(f'<li><a href="/tag/{quote(tag)}">{esc(tag)}</a> ({count})</li>' for tag, count in rows)
        return self.render(request, "Tags", f"<h1>Tags</h1><ul>{items}</ul>")

    async def tag(self, request: web.Request) -> web.Response:
        tag = request.match_info["tag"]
        pages = self.db.query(
            "SELECT p.slug, p.title FROM pages p JOIN page_tags t ON t.page_id = p.id "
            "WHERE t.tag = ? AND p.deleted = 0 ORDER BY p.title COLLATE NOCASE",
            (tag,),
        )
        items = "".join(f'<li><a href="/wiki/{slug}">{esc(title)}</a></li>' for slug, title in pages)
        html = f"<h1>Tag: {esc(tag)}</h1><p>{_plural(len(pages), 'page')} tagged {esc(tag)}</p><ul>{items}</ul>"
        return self.render(request, f"Tag: {tag}", html)

    # ------------------------------------------------------------------ users
    async def profile(self, request: web.Request) -> web.Response:
        rows = self.db.query(
            "SELECT username, name, role FROM users WHERE username = ?", (request.match_info["username"],)
        )
        if not rows:
            raise web.HTTPNotFound(text="No such user")
        username, name, role = rows[0]
        edits = self.db.query(
            "SELECT p.slug, p.title, r.num, r.created, r.summary FROM revisions r "
            "JOIN pages p ON p.id = r.page_id WHERE r.author = ? AND p.deleted = 0 "
            "ORDER BY r.created DESC, r.id DESC",
            (username,),
        )
        table = "".join(
            f'<tr><td>{created}</td><td><a href="/wiki/{slug}">{esc(title)}</a></td><td>revision {num}</td>'
            f"<td>{esc(summary)}</td></tr>"
            for slug, title, num, created, summary in edits
        )
        html = (
            f"<h1>{esc(name)} ({esc(username)})</h1><p>Role: {role}</p><h2>Contributions</h2>"
            f"<p>{_plural(len(edits), 'edit')}</p>"
            f"<table><tr><th>Date</th><th>Page</th><th>Revision</th><th>Summary</th></tr>{table}</table>"
        )
        return self.render(request, f"User {username}", html)

    async def admin_users(self, request: web.Request) -> web.Response:
        if self.role(request) != "admin":
            return self.refuse(request, "Users", "Permission denied: only admins can manage users.", "/")
        rows = self.db.query("SELECT username, name, role FROM users ORDER BY username")
        table = "".join(
            f'<tr><td><a href="/admin/users/{u}">{esc(u)}</a></td><td>{esc(name)}</td><td>{role}</td></tr>'
            for u, name, role in rows
        )
        return self.render(
            request,
            "Users",
            f"<h1>Users</h1><p>{len(rows)} users</p><table><tr><th>Username</th>"
            f"<th>Name</th><th>Role</th></tr>{table}</table>",
        )

    async def admin_user(self, request: web.Request, error: str = "", saved: bool = False) -> web.Response:
        if self.role(request) != "admin":
            return self.refuse(request, "Users", "Permission denied: only admins can manage users.", "/")
        rows = self.db.query(
            "SELECT username, name, role FROM users WHERE username = ?", (request.match_info["username"],)
        )
        if not rows:
            raise web.HTTPNotFound(text="No such user")
        username, name, role = rows[0]
        options = "".join(f"<option value={r}{' selected' if r == role else ''}>{r}</option>" for r in ROLES)
        notes = f"<div class=error role=alert>{esc(error)}</div>" if error else ""
        if request.query.get("saved"):
            article = "an" if role == "admin" else "a"
            notes += f"<div class=flash role=status>{esc(username)} is now {article} {role}.</div>"
        html = (
            f"<h1>User {esc(username)}</h1>{notes}<p>{esc(name)} · "
            f'<a href="/users/{username}">Contributions</a></p><form class=stack method=post '
            f'action="/admin/users/{username}">{_select("Role", "role", options)}'
            f'<button>Save role</button></form><p><a href="/admin/users">All users</a></p>'
        )
        return self.render(request, f"User {username}", html)

    async def admin_user_save(self, request: web.Request) -> web.Response:
        if self.role(request) != "admin":
            return await self.admin_user(request)
        username = request.match_info["username"]
        rows = self.db.query("SELECT role FROM users WHERE username = ?", (username,))
        if not rows:
            raise web.HTTPNotFound(text="No such user")
        role = form_value(await request.post(), "role")
        if role not in ROLES:
            return await self.admin_user(request, "Choose a role.")
        if username == self.user(request) and role != "admin":
            return await self.admin_user(request, "You cannot remove your own admin role.")
        if role != rows[0][0]:
            self.db.execute("UPDATE users SET role = ? WHERE username = ?", (role, username))
            self.audit(self.user(request), "change role", username, f"{rows[0][0]} -> {role}")
        self.redirect(f"/admin/users/{username}?saved=1")

    async def audit_log(self, request: web.Request) -> web.Response:
        if self.role(request) != "admin":
            return self.refuse(request, "Audit log", "Permission denied: only admins can read the audit log.", "/")
        action = request.query.get("action", "")
        actor = request.query.get("user", "").strip()
        where, params = [], []
        if action:
            where.append("action = ?")
            params.append(action)
        if actor:
            where.append("actor = ?")
            params.append(actor)
        sql = f"FROM audit {'WHERE ' + ' AND '.join(where) if where else ''}"
        total = self.db.query(f"SELECT count(*) {sql}", params)[0][0]
        pages = max(1, -(-total // AUDIT_PAGE_SIZE))
        try:
            number = min(max(1, int(request.query.get("page", "1"))), pages)
        except ValueError:
            number = 1
        rows = self.db.query(
            f"SELECT at, actor, action, target, detail {sql} ORDER BY at DESC, id DESC LIMIT ? OFFSET ?",
            params + [AUDIT_PAGE_SIZE, (number - 1) * AUDIT_PAGE_SIZE],
        )
        table = "".join(
            f"<tr><td>{at}</td><td>{esc(who)}</td><td>{esc(what)}</td><td>{esc(target)}</td><td>{esc(detail)}</td></tr>"
            for at, who, what, target, detail in rows
        )
        options = '<option value="">All actions</option>' + "".join(
            f"<option{' selected' if a == action else ''}>{a}</option>" for a in AUDIT_ACTIONS
        )
        query = {k: v for k, v in (("action", action), ("user", actor)) if v}
        pager = []
        if number > 1:
            pager.append(f'<a href="/admin/audit?{urlencode({**query, "page": number - 1})}">Newer entries</a>')
        if number < pages:
            pager.append(f'<a href="/admin/audit?{urlencode({**query, "page": number + 1})}">Older entries</a>')
        html = (
            f'<h1>Audit log</h1><form method=get action="/admin/audit">{_select("Action", "action", options)} '
            f"{_input('User', 'user', actor)} <button>Filter</button>"
            f"</form><p>{total} entries · page {number} of {pages}</p><table><tr><th>Time</th><th>User</th>"
            f"<th>Action</th><th>Target</th><th>Details</th></tr>{table}</table>"
            f"<nav class=pager>{''.join(pager)}</nav>"
        )
        return self.render(request, "Audit log", html)

    # ------------------------------------------------------------------ login
    async def login_form(self, request: web.Request, error: str = "", username: str = "") -> web.Response:
        error_html = f"<div class=error role=alert>{esc(error)}</div>" if error else ""
        html = (
            f"<h1>Log in</h1>{error_html}<form class=stack method=post action=/login>"
            f"{_input('Username', 'username', username)}{_input('Password', 'password', '', ' type=password')}"
            "<button>Log in</button></form>"
        )
        return self.render(request, "Log in", html)

    async def login_submit(self, request: web.Request) -> web.Response:
        form = await request.post()
        username, password = form_value(form, "username"), form_value(form, "password")
        if not self.db.query("SELECT 1 FROM users WHERE username = ? AND password = ?", (username, password)):
            return await self.login_form(request, "Wrong username or password.", username)
        self.audit(username, "login", username)
        response = web.HTTPSeeOther("/")
        response.set_cookie("user", username, path="/")
        raise response

    async def logout(self, request: web.Request) -> web.Response:
        response = web.HTTPSeeOther("/")
        response.del_cookie("user", path="/")
        raise response
