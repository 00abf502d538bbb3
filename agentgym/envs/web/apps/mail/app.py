"""The webmail's pages and form handlers: folders and labels with pagination, message threads, compose/reply/forward, search, bulk actions, contacts, labels and settings."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from aiohttp import web

from agentgym.envs.web.apps.mail.data import FOLDERS, seed
from agentgym.envs.web.apps.mail.views import (
    FOLDER_TITLES,
    STYLE,
    body_html,
    errors,
    field,
    message_table,
    notice,
    pager,
    quoted,
    select,
    sidebar,
    textarea,
)
from agentgym.envs.web.site import WebApp, esc, form_value

__all__ = ["MailApp"]

_EMAIL = re.compile(r"^[\w.+-]+@[\w-]+(\.[\w-]+)+$")
_ROW = "id, folder, sender_name, to_addrs, subject, sent_at, is_read, is_starred"
_FILTERS = {"all": "", "unread": " AND is_read = 0", "starred": " AND is_starred = 1"}
_PAGE_SIZES = ("10", "20", "50")


class MailApp(WebApp):
    """Larkspur Mail: one mailbox per user (see :mod:`agentgym.envs.web.apps.mail.data` for the seed)."""

    name = "mail"

    def build_database(self, db):
        seed(db)

    def routes(self):
        return [
            web.get("/", self.home),
            web.get("/login", self.login_form),
            web.post("/login", self.login),
            web.post("/logout", self.logout),
            web.get("/folder/{folder}", self.folder),
            web.get("/label/{label}", self.label_list),
            web.get("/search", self.search),
            web.post("/bulk", self.bulk),
            web.get("/message/{id:\\d+}", self.message),
            web.post("/message/{id:\\d+}/{action}", self.message_action),
            web.get("/compose", self.compose),
            web.post("/compose", self.send),
            web.get("/contacts", self.contacts),
            web.get("/contacts/new", self.contact_form),
            web.post("/contacts/new", self.contact_save),
            web.get("/contacts/{id:\\d+}", self.contact_form),
            web.post("/contacts/{id:\\d+}", self.contact_save),
            web.post("/contacts/{id:\\d+}/delete", self.contact_delete),
            web.get("/labels", self.labels),
            web.post("/labels", self.label_create),
            web.post("/labels/{id:\\d+}/delete", self.label_delete),
            web.get("/settings", self.settings),
            web.post("/settings", self.settings_save),
        ]

    # ------------------------------------------------------------------ helpers
    def _account(self, request: web.Request) -> dict:
        """The logged-in user's row as a dict; anyone else goes to the login page."""
        rows = self.db.query(
            "SELECT username, display_name, email, signature, page_size FROM users WHERE username = ?",
            (self.user(request) or "",),
        )
        if not rows:
            self.redirect("/login")
        return dict(zip(("username", "display_name", "email", "signature", "page_size"), rows[0]))

    def _labels(self, owner: str) -> list[str]:
        return [name for (name,) in self.db.query("SELECT name FROM labels WHERE owner = ? ORDER BY name", (owner,))]

    def _layout(
        self,
        request: web.Request,
        me: dict,
        title: str,
        content: str,
        current: str = "",
        quick_search: bool = True,
        status: int = 200,
    ) -> web.Response:
        owner = me["username"]
        unread = dict(
            self.db.query(
                "SELECT folder, COUNT(*) FROM messages WHERE owner = ? AND is_read = 0 GROUP BY folder", (owner,)
            )
        )
        labels = self.db.query(
            "SELECT l.name, COUNT(m.id) FROM labels l LEFT JOIN message_labels ml ON ml.label_id = l.id "
            "LEFT JOIN messages m ON m.id = ml.message_id AND m.is_read = 0 WHERE l.owner = ? GROUP BY l.id "
            "ORDER BY l.name",
            (owner,),
        )
        search = (
            "<form class=quick method=get action=/search role=search>"
            '<input type=search name=q aria-label="Search mail" placeholder="Search mail">'
            '<button>Search</button> <a href="/search?advanced=1">Advanced search</a></form>'
            if quick_search
            else ""
        )
        nav = (
            '<a href="/folder/inbox">Mail</a><a href="/contacts">Contacts</a><a href="/settings">Settings</a>'
            "<form method=post action=/logout><button>Log out</button></form>"
        )
        body = (
            f"<div class=layout>{sidebar(current, unread, labels)}<div class=content>{search}"
            f"{notice(request.query.get('notice', ''))}{content}</div></div>"
        )
        return self.page(request, f"{title} – Larkspur Mail", body, nav=nav, style=STYLE, status=status)

    def _not_found(self, request: web.Request, me: dict, what: str) -> web.Response:
        return self._layout(request, me, "Not found", f"<h1>Not found</h1><p>{esc(what)}</p>", status=404)

    def _listing(
        self,
        request: web.Request,
        me: dict,
        where: str,
        params: tuple,
        title: str,
        path: str,
        *,
        show_folder: bool = False,
        sent_view: bool = False,
        extra: str = "",
        query: dict | None = None,
        quick_search: bool = True,
    ) -> web.Response:
        """A paginated message table for the rows matching ``where`` (newest first, or oldest with ``sort=oldest``)."""
        query = dict(query or {})
        order = "ASC" if query.get("sort") == "oldest" else "DESC"
        total = self.db.query(f"SELECT COUNT(*) FROM messages WHERE {where}", params)[0][0]
        size = me["page_size"]
        pages = max(1, -(-total // size))
        try:
            page = min(max(1, int(request.query.get("page", "1"))), pages)
        except ValueError:
            page = 1
        rows = self.db.query(
            f"SELECT {_ROW} FROM messages WHERE {where} ORDER BY sent_at {order}, id {order} LIMIT ? OFFSET ?",
            params + (size, (page - 1) * size),
        )
        first = (page - 1) * size + 1 if total else 0
        back = path + "?" + urlencode({k: v for k, v in query.items() if v} | {"page": str(page)})
        content = (
            f"<h1>{esc(title)}</h1>{extra}<p>Showing {first}–{first + len(rows) - 1 if rows else 0} of "
            f"{total} messages</p>"
            + message_table(rows, back, self._labels(me["username"]), show_folder=show_folder, sent_view=sent_view)
            + pager(path, query, page, pages)
        )
        return self._layout(request, me, title, content, current=path, quick_search=quick_search)

    @staticmethod
    def _with_notice(back: str, text: str) -> str:
        parts = urlsplit(back)
        path = parts.path if parts.path.startswith("/") and not parts.path.startswith("//") else "/folder/inbox"
        query = [(k, v) for k, v in parse_qsl(parts.query) if k != "notice"] + [("notice", text)]
        return path + "?" + urlencode(query)

    def _message(self, owner: str, id_: int) -> dict | None:
        rows = self.db.query(
            "SELECT id, folder, thread_id, sender_name, sender_email, to_addrs, cc_addrs, subject, "
            "body, sent_at, is_read, is_starred FROM messages WHERE id = ? AND owner = ?",
            (id_, owner),
        )
        keys = (
            "id",
            "folder",
            "thread_id",
            "sender_name",
            "sender_email",
            "to",
            "cc",
            "subject",
            "body",
            "sent_at",
            "is_read",
            "is_starred",
        )
        return dict(zip(keys, rows[0])) if rows else None

    # ------------------------------------------------------------------ login
    async def home(self, request):
        self._account(request)
        self.redirect("/folder/inbox")

    async def login_form(self, request, problems: list[str] | None = None, username: str = ""):
        body = (
            f"<h1>Sign in to Larkspur Mail</h1>{errors(problems or [])}<form class=stack method=post action=/login>"
            f"{field('Username', 'username', username)}{field('Password', 'password', kind='password')}"
            f"<button>Sign in</button></form>"
        )
        return self.page(request, "Sign in – Larkspur Mail", body, style=STYLE, status=400 if problems else 200)

    async def login(self, request):
        form = await request.post()
        username, password = form_value(form, "username"), form_value(form, "password")
        if not self.db.query("SELECT 1 FROM users WHERE username = ? AND password = ?", (username, password)):
            return await self.login_form(request, ["Wrong username or password."], username)
        response = web.HTTPSeeOther("/folder/inbox")
        response.set_cookie("user", username, path="/")
        raise response

    async def logout(self, request):
        response = web.HTTPSeeOther("/login")
        response.del_cookie("user", path="/")
        raise response

    # ------------------------------------------------------------------ lists
    async def folder(self, request):
        me = self._account(request)
        folder = request.match_info["folder"]
        if folder not in FOLDERS:
            return self._not_found(request, me, f"There is no folder called {folder!r}.")
        show = request.query.get("filter", "all")
        show = show if show in _FILTERS else "all"
        sort = "oldest" if request.query.get("sort") == "oldest" else "newest"
        query = {"filter": show if show != "all" else "", "sort": sort if sort != "newest" else ""}

        def choice(key: str, value: str, text: str, current: str) -> str:
            if value == current:
                return f"<strong>{text}</strong>"
            target = {
                k: v
                for k, v in (query | {key: value}).items()
                if v and (k, v) not in (("filter", "all"), ("sort", "newest"))
            }
            return f'<a href="/folder/{folder}?{esc(urlencode(target))}">{text}</a>'

        tabs = " ".join(choice("filter", name, name.title(), show) for name in _FILTERS)
        orders = " ".join(
            choice("sort", value, text, sort)
            for value, text in (("newest", "Newest first"), ("oldest", "Oldest first"))
        )
        return self._listing(
            request,
            me,
            "owner = ? AND folder = ?" + _FILTERS[show],
            (me["username"], folder),
            FOLDER_TITLES[folder],
            f"/folder/{folder}",
            sent_view=folder == "sent",
            extra=f"<p>Show: {tabs}</p><p>Sort: {orders}</p>",
            query=query,
        )

    async def label_list(self, request):
        me = self._account(request)
        name = request.match_info["label"]
        found = self.db.query("SELECT id FROM labels WHERE owner = ? AND name = ?", (me["username"], name))
        if not found:
            return self._not_found(request, me, f"There is no label called {name!r}.")
        where = "owner = ? AND id IN (SELECT message_id FROM message_labels WHERE label_id = ?)"
        return self._listing(
            request,
            me,
            where,
            (me["username"], found[0][0]),
            f"Label: {name}",
            f"/label/{quote(name)}",
            show_folder=True,
        )

    async def search(self, request):
        me = self._account(request)
        q = request.query.get("q", "").strip()
        sender = request.query.get("from", "").strip()
        folder = request.query.get("folder", "all")
        folder = folder if folder in FOLDERS else "all"
        unread, starred = request.query.get("unread") == "1", request.query.get("starred") == "1"
        form = (
            "<form class=stack method=get action=/search role=search>"
            f'<label>Search mail <input type=search name=q value="{esc(q)}"></label>'
            f"{field('From', 'from', sender)}"
            + select("Folder", "folder", [("all", "All mail")] + list(FOLDER_TITLES.items()), folder)
            + f"<label><input type=checkbox name=unread value=1{' checked' if unread else ''}> Unread only</label>"
            f"<label><input type=checkbox name=starred value=1{' checked' if starred else ''}> Starred only"
            "</label><button>Search</button></form>"
        )
        if not (q or sender or unread or starred):
            return self._layout(request, me, "Search", "<h1>Search mail</h1>" + form, quick_search=False)
        where, params = ["owner = ?"], [me["username"]]
        if folder == "all":
            where.append("folder != 'trash'")  # like most webmail, "all mail" leaves the trash out
        else:
            where.append("folder = ?")
            params.append(folder)
        if q:
            where.append(
                "(instr(lower(subject), lower(?)) OR instr(lower(body), lower(?)) OR "
                "instr(lower(sender_name), lower(?)) OR instr(lower(sender_email), lower(?)))"
            )
            params += [q] * 4
        if sender:
            where.append("(instr(lower(sender_name), lower(?)) OR instr(lower(sender_email), lower(?)))")
            params += [sender] * 2
        if unread:
            where.append("is_read = 0")
        if starred:
            where.append("is_starred = 1")
        query = {
            "q": q,
            "from": sender,
            "folder": folder,
            "unread": "1" if unread else "",
            "starred": "1" if starred else "",
        }
        return self._listing(
            request,
            me,
            " AND ".join(where),
            tuple(params),
            "Search results",
            "/search",
            show_folder=True,
            extra=form,
            query=query,
            quick_search=False,
        )

    async def bulk(self, request):
        me = self._account(request)
        form = await request.post()
        back = form_value(form, "back", "/folder/inbox")
        ids = [int(value) for value in form.getall("ids", []) if str(value).isdigit()]
        owner = me["username"]
        ids = (
            [
                id_
                for (id_,) in self.db.query(
                    f"SELECT id FROM messages WHERE owner = ? AND id IN ({','.join('?' * len(ids))})", (owner, *ids)
                )
            ]
            if ids
            else []
        )
        if not ids:
            self.redirect(self._with_notice(back, "Select at least one message first."))
        marks = ",".join("?" * len(ids))
        action = form_value(form, "action")
        count = f"{len(ids)} message{'s' if len(ids) != 1 else ''}"
        if action == "move":
            target = form_value(form, "destination")
            if target not in FOLDER_TITLES or target == "sent":
                self.redirect(self._with_notice(back, "Choose a folder to move to."))
            self.db.execute(f"UPDATE messages SET folder = ? WHERE id IN ({marks})", (target, *ids))
            text = f"Moved {count} to {FOLDER_TITLES[target]}."
        elif action in ("read", "unread"):
            self.db.execute(f"UPDATE messages SET is_read = ? WHERE id IN ({marks})", (int(action == "read"), *ids))
            text = f"Marked {count} as {action}."
        elif action in ("star", "unstar"):
            self.db.execute(f"UPDATE messages SET is_starred = ? WHERE id IN ({marks})", (int(action == "star"), *ids))
            text = f"{'Starred' if action == 'star' else 'Unstarred'} {count}."
        elif action == "delete":
            self._delete(ids)
            text = f"Deleted {count}."
        elif action == "label":
            name = form_value(form, "label")
            label = self.db.query("SELECT id FROM labels WHERE owner = ? AND name = ?", (owner, name))
            if not label:
                self.redirect(self._with_notice(back, "Choose a label first."))
            self.db.conn.executemany(
                "INSERT OR IGNORE INTO message_labels VALUES (?, ?)", [(id_, label[0][0]) for id_ in ids]
            )
            text = f"Labelled {count} as {name}."
        else:
            text = "Unknown action."
        self.redirect(self._with_notice(back, text))

    def _delete(self, ids: list[int]) -> None:
        """To the trash; messages already there are deleted for good."""
        marks = ",".join("?" * len(ids))
        gone = [
            id_ for (id_,) in self.db.query(f"SELECT id FROM messages WHERE folder = 'trash' AND id IN ({marks})", ids)
        ]
        if gone:
            gone_marks = ",".join("?" * len(gone))
            self.db.execute(f"DELETE FROM message_labels WHERE message_id IN ({gone_marks})", gone)
            self.db.execute(f"DELETE FROM messages WHERE id IN ({gone_marks})", gone)
        self.db.execute(f"UPDATE messages SET folder = 'trash' WHERE id IN ({marks})", ids)

    # ------------------------------------------------------------------ one message
    async def message(self, request):
        me = self._account(request)
        msg = self._message(me["username"], int(request.match_info["id"]))
        if msg is None:
            return self._not_found(request, me, "This message does not exist or was deleted.")
        if not msg["is_read"]:  # opening a message reads it; reloading it changes nothing more
            self.db.execute("UPDATE messages SET is_read = 1 WHERE id = ?", (msg["id"],))
        owner, id_ = me["username"], msg["id"]
        labels = self.db.query(
            "SELECT l.name FROM labels l JOIN message_labels ml ON ml.label_id = l.id "
            "WHERE ml.message_id = ? ORDER BY l.name",
            (id_,),
        )
        chips = "".join(
            f"<span class=chip>{esc(name)}</span><form method=post action=/message/{id_}/unlabel "
            f'style="display:inline"><input type=hidden name=label value="{esc(name)}">'
            f'<button aria-label="Remove label {esc(name)}">×</button></form>'
            for (name,) in labels
        )
        folder_options = [(name, title) for name, title in FOLDER_TITLES.items() if name not in ("sent", msg["folder"])]
        own_labels = [name for name in self._labels(owner) if (name,) not in labels]
        label_form = (
            (
                f"<form method=post action=/message/{id_}/label>"
                + select("Add label", "label", [(n, n) for n in own_labels])
                + "<button>Apply label</button></form>"
            )
            if own_labels
            else ""
        )
        actions = (
            f'<p><a href="/compose?mode=reply&id={id_}">Reply</a> '
            f'<a href="/compose?mode=reply_all&id={id_}">Reply all</a> '
            f'<a href="/compose?mode=forward&id={id_}">Forward</a></p><div class=bulk>'
            f"<form method=post action=/message/{id_}/star><button>{'Unstar' if msg['is_starred'] else 'Star'}"
            f"</button></form><form method=post action=/message/{id_}/unread><button>Mark as unread</button>"
            f"</form><form method=post action=/message/{id_}/move>"
            + select("Move to", "destination", folder_options)
            + "<button>Move</button></form>"
            f"<form method=post action=/message/{id_}/delete><button>"
            f"{'Delete forever' if msg['folder'] == 'trash' else 'Delete'}</button></form>{label_form}</div>"
        )
        thread = self.db.query(
            "SELECT id, sender_name, sent_at, body, folder FROM messages WHERE owner = ? AND "
            "thread_id = ? ORDER BY sent_at, id",
            (owner, msg["thread_id"]),
        )
        conversation = ""
        if len(thread) > 1:
            items = []
            for other, sender, sent_at, body, folder in thread:
                current = other == id_
                heading = (
                    f"{esc(sender)} – {esc(sent_at)}"
                    if current
                    else f'<a href="/message/{other}">{esc(sender)} – {esc(sent_at)}</a>'
                )
                items.append(
                    f'<article class="{"current" if current else ""}"><h3>{heading}</h3>'
                    f"<p>{FOLDER_TITLES[folder]}</p>{body_html(body)}</article>"
                )
            conversation = (
                f"<section class=thread aria-label=Conversation><h2>Conversation ({len(thread)} messages)"
                f"</h2>{''.join(items)}</section>"
            )
        star = "<p>★ Starred</p>" if msg["is_starred"] else ""
        content = (
            f'<p><a href="/folder/{msg["folder"]}">Back to {FOLDER_TITLES[msg["folder"]]}</a></p>'
            f"<h1>{esc(msg['subject'])}</h1>{star}{actions}<table aria-label=Headers>"
            f"<tr><th>From</th><td>{esc(msg['sender_name'])} &lt;{esc(msg['sender_email'])}&gt;</td></tr>"
            f"<tr><th>To</th><td>{esc(msg['to'])}</td></tr>"
            + (f"<tr><th>Cc</th><td>{esc(msg['cc'])}</td></tr>" if msg["cc"] else "")
            + f"<tr><th>Date</th><td>{esc(msg['sent_at'])}</td></tr>"
            f"<tr><th>Folder</th><td>{FOLDER_TITLES[msg['folder']]}</td></tr>"
            + (f"<tr><th>Labels</th><td>{chips}</td></tr>" if labels else "")
            + "</table>"
            + ("" if len(thread) > 1 else body_html(msg["body"]))
            + conversation
        )
        return self._layout(request, me, msg["subject"], content, current=f"/folder/{msg['folder']}")

    async def message_action(self, request):
        me = self._account(request)
        msg = self._message(me["username"], int(request.match_info["id"]))
        if msg is None:
            return self._not_found(request, me, "This message does not exist or was deleted.")
        id_, action = msg["id"], request.match_info["action"]
        form = await request.post()
        folder_page = f"/folder/{msg['folder']}"
        if action == "star":
            self.db.execute("UPDATE messages SET is_starred = 1 - is_starred WHERE id = ?", (id_,))
            self.redirect(f"/message/{id_}")
        if action == "unread":  # back to the list: showing the message again would read it
            self.db.execute("UPDATE messages SET is_read = 0 WHERE id = ?", (id_,))
            self.redirect(self._with_notice(folder_page, "Marked as unread."))
        if action == "move":
            target = form_value(form, "destination")
            if target in FOLDER_TITLES and target != "sent":
                self.db.execute("UPDATE messages SET folder = ? WHERE id = ?", (target, id_))
                self.redirect(self._with_notice(folder_page, f"Moved to {FOLDER_TITLES[target]}."))
            self.redirect(f"/message/{id_}")
        if action == "delete":
            forever = msg["folder"] == "trash"
            self._delete([id_])
            self.redirect(self._with_notice(folder_page, "Deleted forever." if forever else "Moved to Trash."))
        if action in ("label", "unlabel"):
            label = self.db.query(
                "SELECT id FROM labels WHERE owner = ? AND name = ?", (me["username"], form_value(form, "label"))
            )
            if label and action == "label":
                self.db.execute("INSERT OR IGNORE INTO message_labels VALUES (?, ?)", (id_, label[0][0]))
            elif label:
                self.db.execute("DELETE FROM message_labels WHERE message_id = ? AND label_id = ?", (id_, label[0][0]))
            self.redirect(f"/message/{id_}")
        return self._not_found(request, me, f"Unknown action {action!r}.")

    # ------------------------------------------------------------------ compose and send
    async def compose(self, request):
        me = self._account(request)
        values = {"to": request.query.get("to", ""), "cc": "", "subject": "", "body": "", "mode": "", "ref": ""}
        signature = f"\n\n-- \n{me['signature']}" if me["signature"] else ""
        values["body"] = signature
        mode = request.query.get("mode", "")
        id_ = request.query.get("id", "")
        ref = self._message(me["username"], int(id_)) if id_.isdigit() else None
        if mode in ("reply", "reply_all", "forward") and ref:
            values["mode"], values["ref"] = mode, str(ref["id"])
            subject = re.sub(r"^(re|fwd?):\s*", "", ref["subject"], flags=re.I)
            if mode == "forward":
                values["subject"] = f"Fwd: {subject}"
                values["body"] = (
                    f"{signature}\n\n---------- Forwarded message ----------\nFrom: {ref['sender_name']} "
                    f"<{ref['sender_email']}>\nDate: {ref['sent_at']}\nSubject: {ref['subject']}\n"
                    f"To: {ref['to']}\n\n{ref['body']}"
                )
            else:
                mine = ref["sender_email"] == me["email"]
                to = ref["to"] if mine else ref["sender_email"]
                values["to"] = to
                values["subject"] = f"Re: {subject}"
                if mode == "reply_all":
                    others = [a for a in _split(ref["to"]) + _split(ref["cc"]) if a not in (me["email"], *_split(to))]
                    values["cc"] = ", ".join(dict.fromkeys(others))
                values["body"] = (
                    f"{signature}\n\nOn {ref['sent_at']}, {ref['sender_name']} wrote:\n{quoted(ref['body'])}"
                )
        return self._compose_page(request, me, values, [])

    def _compose_page(self, request, me: dict, values: dict, problems: list[str]) -> web.Response:
        titles = {"reply": "Reply", "reply_all": "Reply all", "forward": "Forward"}
        title = titles.get(values["mode"], "New message")
        body = (
            f"<h1>{title}</h1>{errors(problems)}<form class=stack method=post action=/compose>"
            f'<input type=hidden name=mode value="{esc(values["mode"])}">'
            f'<input type=hidden name=ref value="{esc(values["ref"])}">'
            f"<p>From: {esc(me['display_name'])} &lt;{esc(me['email'])}&gt;</p>"
            f"{field('To', 'to', values['to'])}{field('Cc', 'cc', values['cc'])}"
            f"{field('Subject', 'subject', values['subject'])}{textarea('Body', 'body', values['body'], 12)}"
            f'<button>Send</button> <a href="/folder/inbox">Discard</a></form>'
            "<p>Separate several recipients with commas; a contact's name works too.</p>"
        )
        return self._layout(request, me, title, body, current="/compose", status=400 if problems else 200)

    def _resolve(self, owner: str, text: str, problems: list[str]) -> list[str]:
        """Addresses from a To/Cc field: emails, ``Name <email>``, or a contact's name."""
        found = []
        for part in filter(None, (p.strip() for p in re.split(r"[,;]", text))):
            match = re.search(r"<([^>]+)>", part)
            address = (match.group(1) if match else part).strip().lower()
            if _EMAIL.match(address):
                found.append(address)
                continue
            contact = self.db.query(
                "SELECT email FROM contacts WHERE owner = ? AND lower(name) = lower(?)", (owner, part)
            )
            if contact:
                found.append(contact[0][0])
            else:
                problems.append(f"“{part}” is not an email address or the name of one of your contacts.")
        return list(dict.fromkeys(found))

    async def send(self, request):
        me = self._account(request)
        form = await request.post()
        values = {key: form_value(form, key) for key in ("to", "cc", "subject", "mode", "ref")}
        values["body"] = form.get("body", "") if isinstance(form.get("body", ""), str) else ""
        problems: list[str] = []
        to = self._resolve(me["username"], values["to"], problems)
        cc = self._resolve(me["username"], values["cc"], problems)
        if not to and not problems:
            problems.append("Add at least one recipient in To.")
        if not values["subject"]:
            problems.append("The subject is empty.")
        if problems:
            return self._compose_page(request, me, values, problems)
        ref = self._message(me["username"], int(values["ref"])) if values["ref"].isdigit() else None
        replying = ref is not None and values["mode"] in ("reply", "reply_all")
        when = self.now()
        body = values["body"].replace("\r\n", "\n")
        cursor = self.db.execute(
            "INSERT INTO messages (owner, folder, thread_id, in_reply_to, sender_name, sender_email, to_addrs, "
            "cc_addrs, subject, body, sent_at, is_read, is_starred) VALUES (?, 'sent', ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, 0)",
            (
                me["username"],
                ref["thread_id"] if replying else None,
                ref["id"] if replying else None,
                me["display_name"],
                me["email"],
                ", ".join(to),
                ", ".join(cc),
                values["subject"],
                body,
                when,
            ),
        )
        if not replying:
            self.db.execute("UPDATE messages SET thread_id = id WHERE id = ?", (cursor.lastrowid,))
        # Colleagues on this server get the message in their inbox.
        for (username,) in self.db.query(
            f"SELECT username FROM users WHERE email IN ({','.join('?' * len(to + cc))})", to + cc
        ):
            delivered = self.db.execute(
                "INSERT INTO messages (owner, folder, sender_name, sender_email, to_addrs, cc_addrs, subject, body, "
                "sent_at, is_read, is_starred) VALUES (?, 'inbox', ?, ?, ?, ?, ?, ?, ?, 0, 0)",
                (
                    username,
                    me["display_name"],
                    me["email"],
                    ", ".join(to),
                    ", ".join(cc),
                    values["subject"],
                    body,
                    when,
                ),
            )
            self.db.execute("UPDATE messages SET thread_id = id WHERE id = ?", (delivered.lastrowid,))
        self.redirect("/folder/sent?" + urlencode({"notice": "Message sent."}))

    # ------------------------------------------------------------------ contacts
    async def contacts(self, request):
        me = self._account(request)
        q = request.query.get("q", "").strip()
        rows = self.db.query(
            "SELECT id, name, email, phone, company FROM contacts WHERE owner = ? AND "
            "(instr(lower(name), lower(?)) OR instr(lower(email), lower(?)) OR "
            "instr(lower(company), lower(?))) ORDER BY name",
            (me["username"], q, q, q),
        )
        table = "".join(
            f"<tr><td>{esc(name)}</td><td>{esc(email)}</td><td>{esc(phone)}</td><td>{esc(company)}</td>"
            f'<td><a href="/contacts/{id_}" aria-label="Edit {esc(name)}">Edit</a> '
            f'<a href="/compose?to={quote(email)}" aria-label="Email {esc(name)}">Email</a></td></tr>'
            for id_, name, email, phone, company in rows
        )
        content = (
            f"<h1>Contacts</h1><form method=get action=/contacts role=search><input type=search name=q "
            f'value="{esc(q)}" aria-label="Search contacts"><button>Find</button></form>'
            f'<p><a href="/contacts/new">Add contact</a></p><p>{len(rows)} contacts</p>'
            + (
                f"<table aria-label=Contacts><tr><th>Name</th><th>Email</th><th>Phone</th><th>Company</th>"
                f"<th>Actions</th></tr>{table}</table>"
                if rows
                else "<p>No contacts found.</p>"
            )
        )
        return self._layout(request, me, "Contacts", content, current="/contacts")

    async def contact_form(self, request, values: dict | None = None, problems: list[str] | None = None):
        me = self._account(request)
        id_ = request.match_info.get("id")
        if values is None:
            values = dict.fromkeys(("name", "email", "phone", "company", "notes"), "")
            if id_:
                row = self.db.query(
                    "SELECT name, email, phone, company, notes FROM contacts WHERE id = ? AND owner = ?",
                    (int(id_), me["username"]),
                )
                if not row:
                    return self._not_found(request, me, "No such contact.")
                values = dict(zip(values, row[0]))
        action = f"/contacts/{id_}" if id_ else "/contacts/new"
        delete = (
            f"<form method=post action=/contacts/{id_}/delete><button>Delete contact</button></form>" if id_ else ""
        )
        content = (
            f"<h1>{'Edit contact' if id_ else 'New contact'}</h1>{errors(problems or [])}"
            f"<form class=stack method=post action={action}>{field('Name', 'name', values['name'])}"
            f"{field('Email', 'email', values['email'])}{field('Phone', 'phone', values['phone'])}"
            f"{field('Company', 'company', values['company'])}{textarea('Notes', 'notes', values['notes'], 3)}"
            f'<button>Save contact</button> <a href="/contacts">Cancel</a></form>{delete}'
        )
        return self._layout(request, me, "Contact", content, current="/contacts", status=400 if problems else 200)

    async def contact_save(self, request):
        me = self._account(request)
        id_ = request.match_info.get("id")
        form = await request.post()
        values = {key: form_value(form, key) for key in ("name", "email", "phone", "company", "notes")}
        values["email"] = values["email"].lower()
        problems = []
        if not values["name"]:
            problems.append("Name is required.")
        if not _EMAIL.match(values["email"]):
            problems.append("Enter a valid email address.")
        elif self.db.query(
            "SELECT 1 FROM contacts WHERE owner = ? AND email = ? AND id != ?",
            (me["username"], values["email"], int(id_ or 0)),
        ):
            problems.append(f"You already have a contact with the address {values['email']}.")
        if values["phone"] and not re.fullmatch(r"[+\d][\d\s().-]{5,}", values["phone"]):
            problems.append("The phone number may contain only digits, spaces, +, -, ( and ).")
        if problems:
            return await self.contact_form(request, values, problems)
        if id_:
            self.db.execute(
                "UPDATE contacts SET name = ?, email = ?, phone = ?, company = ?, notes = ? WHERE id = ? AND owner = ?",
                (*values.values(), int(id_), me["username"]),
            )
            text = f"Saved {values['name']}."
        else:
            self.db.execute(
                "INSERT INTO contacts (owner, name, email, phone, company, notes) VALUES (?, ?, ?, ?, ?, ?)",
                (me["username"], *values.values()),
            )
            text = f"Added {values['name']} to your contacts."
        self.redirect("/contacts?" + urlencode({"notice": text}))

    async def contact_delete(self, request):
        me = self._account(request)
        self.db.execute(
            "DELETE FROM contacts WHERE id = ? AND owner = ?", (int(request.match_info["id"]), me["username"])
        )
        self.redirect("/contacts?" + urlencode({"notice": "Contact deleted."}))

    # ------------------------------------------------------------------ labels
    async def labels(self, request, problems: list[str] | None = None, name: str = ""):
        me = self._account(request)
        rows = self.db.query(
            "SELECT l.id, l.name, COUNT(ml.message_id) FROM labels l LEFT JOIN message_labels ml "
            "ON ml.label_id = l.id WHERE l.owner = ? GROUP BY l.id ORDER BY l.name",
            (me["username"],),
        )
        items = "".join(
            f'<tr><td><a href="/label/{quote(label)}">{esc(label)}</a></td><td>{count}</td><td>'
            f'<form method=post action=/labels/{id_}/delete><button aria-label="Delete label {esc(label)}">'
            f"Delete</button></form></td></tr>"
            for id_, label, count in rows
        )
        content = (
            f"<h1>Labels</h1>{errors(problems or [])}<table aria-label=Labels><tr><th>Label</th>"
            f"<th>Messages</th><th></th></tr>{items}</table><h2>New label</h2><form method=post action=/labels>"
            f"{field('Label name', 'name', name)}<button>Create label</button></form>"
        )
        return self._layout(request, me, "Labels", content, current="/labels", status=400 if problems else 200)

    async def label_create(self, request):
        me = self._account(request)
        form = await request.post()
        name = form_value(form, "name")
        problems = []
        if not name:
            problems.append("Enter a name for the label.")
        elif len(name) > 30:
            problems.append("Label names are at most 30 characters.")
        elif "/" in name:  # the label's page is /label/<name>
            problems.append("Label names cannot contain “/”.")
        elif name.lower() in FOLDERS or name.lower() in ("starred", "all mail"):
            problems.append(f"“{name}” is a folder name; choose another.")
        elif self.db.query("SELECT 1 FROM labels WHERE owner = ? AND lower(name) = lower(?)", (me["username"], name)):
            problems.append(f"A label called “{name}” already exists.")
        if problems:
            return await self.labels(request, problems, name)
        self.db.execute("INSERT INTO labels (owner, name) VALUES (?, ?)", (me["username"], name))
        self.redirect("/labels?" + urlencode({"notice": f"Label “{name}” created."}))

    async def label_delete(self, request):
        me = self._account(request)
        id_ = int(request.match_info["id"])
        if self.db.query("SELECT 1 FROM labels WHERE id = ? AND owner = ?", (id_, me["username"])):
            self.db.execute("DELETE FROM message_labels WHERE label_id = ?", (id_,))
            self.db.execute("DELETE FROM labels WHERE id = ?", (id_,))
        self.redirect("/labels?" + urlencode({"notice": "Label deleted."}))

    # ------------------------------------------------------------------ settings
    async def settings(self, request, values: dict | None = None, problems: list[str] | None = None):
        me = self._account(request)
        values = values or {
            "display_name": me["display_name"],
            "signature": me["signature"],
            "page_size": str(me["page_size"]),
        }
        content = (
            f"<h1>Settings</h1>{errors(problems or [])}<form class=stack method=post action=/settings>"
            f"{field('Display name', 'display_name', values['display_name'])}"
            f"<p>Email address: {esc(me['email'])}</p>{textarea('Signature', 'signature', values['signature'], 4)}"
            + select("Messages per page", "page_size", [(n, n) for n in _PAGE_SIZES], values["page_size"])
            + "<button>Save settings</button></form>"
        )
        return self._layout(request, me, "Settings", content, current="/settings", status=400 if problems else 200)

    async def settings_save(self, request):
        me = self._account(request)
        form = await request.post()
        signature = form.get("signature", "")
        values = {
            "display_name": form_value(form, "display_name"),
            "signature": signature.replace("\r\n", "\n").strip() if isinstance(signature, str) else "",
            "page_size": form_value(form, "page_size", "20"),
        }
        problems = []
        if not values["display_name"]:
            problems.append("The display name cannot be empty.")
        if len(values["signature"]) > 500:
            problems.append("The signature is longer than 500 characters.")
        if values["page_size"] not in _PAGE_SIZES:
            problems.append("Choose 10, 20 or 50 messages per page.")
        if problems:
            return await self.settings(request, values, problems)
        self.db.execute(
            "UPDATE users SET display_name = ?, signature = ?, page_size = ? WHERE username = ?",
            (values["display_name"], values["signature"], int(values["page_size"]), me["username"]),
        )
        self.redirect("/settings?" + urlencode({"notice": "Settings saved."}))


def _split(addresses: str) -> list[str]:
    return [a.strip() for a in addresses.split(",") if a.strip()]
