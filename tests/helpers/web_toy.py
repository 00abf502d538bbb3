"""A small notes app for testing WebEnv itself: a list of notes, a form that adds one, a page that blocks a remote image, a visit counter kept in local storage by script, one kept by the server, frames and downloads the browser must refuse."""

import asyncio

from aiohttp import web

from agentgym.envs.web.site import WebApp, esc, form_value
from agentgym.envs.web.tasks import AnswerExact, DbCheck, WebTask


class App(WebApp):
    name = "notes"

    def build_database(self, db):
        db.conn.executescript(
            "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT, created TEXT);"
            "INSERT INTO notes (text, created) VALUES ('first note', '2026-01-05 09:00');"
            "CREATE TABLE seen (n INTEGER); INSERT INTO seen VALUES (0);"
        )

    def routes(self):
        return [
            web.get("/", self.home),
            web.post("/add", self.add),
            web.get("/external", self.external),
            web.get("/visits", self.visits),
            web.get("/seen", self.seen),
            web.get("/frames", self.frames),
            web.get("/downloads", self.downloads),
            web.get("/export", self.export),
        ]

    async def home(self, request):
        rows = self.db.query("SELECT id, text, created FROM notes ORDER BY id")
        items = "".join(f"<li>{esc(text)} <small>{esc(created)}</small></li>" for _, text, created in rows)
        body = (
            f"<h1>Notes</h1><ul>{items}</ul><form method=post action=/add><label>Note <input name=text></label>"
            "<select name=tag aria-label=Tag><option>work</option><option>home</option></select>"
            "<label><input type=checkbox name=pin> Pin</label><button>Add</button></form>"
            "<a href=/external>External page</a> <a href=/visits>Visits</a> <a href=/external target=_blank>Open in new tab</a>"
            "<p>Total: " + str(len(rows)) + "</p>"
        )
        return self.page(request, "Notes", body)

    async def add(self, request):
        form = await request.post()
        self.db.execute("INSERT INTO notes (text, created) VALUES (?, ?)", (form_value(form, "text"), self.now()))
        self.redirect("/")

    async def external(self, request):
        return self.page(request, "External", '<img src="http://example.com/x.png" alt=remote><p>here</p>')

    async def visits(self, request):
        # State the server cannot restore: a fork that reloads this page sees another count and must replay.
        script = (
            "<script>const n = Number(localStorage.visits || 0) + 1; localStorage.visits = n;"
            "document.getElementById('visits').textContent = 'Visits: ' + n;</script>"
        )
        return self.page(request, "Visits", "<p id=visits></p><a href=/>Home</a>" + script)

    async def seen(self, request):
        # A GET that changes server state: only the agent's own visits may count.
        self.db.execute("UPDATE seen SET n = n + 1")
        return self.page(request, "Seen", f"<p>Seen {self.db.query('SELECT n FROM seen')[0][0]} times</p>")

    async def frames(self, request):
        # What an injected page could do: frames with documents of its own making.
        script = (
            "<script>const f = document.createElement('iframe'); f.title = 'blob frame';"
            "f.src = URL.createObjectURL(new Blob(['<p>in a blob frame</p>'], {type: 'text/html'}));"
            "document.body.appendChild(f);</script>"
        )
        return self.page(
            request,
            "Frames",
            '<iframe title="data frame" src="data:text/html,<p>in a data frame</p>">'
            '</iframe><a href="data:text/html,<p>a data page</p>">Data page</a>' + script,
        )

    async def downloads(self, request):
        blob = (
            "<script>document.getElementById('blob').href = URL.createObjectURL("
            "new Blob(['notes-secret-blob'], {type: 'text/plain'}));</script>"
        )
        return self.page(
            request,
            "Downloads",
            "<a href=/export>Export</a> <a href=/export?inline=1 download=notes.txt>"
            "Save</a> <a id=blob download=blob.txt href=#>Blob</a>" + blob,
        )

    async def export(self, request):
        await asyncio.sleep(0.3)  # a slow server: the refusal comes well after the click returned
        headers = {} if request.query.get("inline") else {"Content-Disposition": "attachment; filename=notes.txt"}
        return web.Response(text="notes-secret-export", content_type="text/plain", headers=headers)


def tasks():
    return [
        WebTask(
            "add/0",
            "add",
            "Add a note saying 'buy milk', then answer 'done'.",
            DbCheck("SELECT text FROM notes ORDER BY id", (("first note",), ("buy milk",))),
            (),
        ),
        WebTask("count/0", "count", "How many notes are there?", AnswerExact("1"), ()),
    ]
