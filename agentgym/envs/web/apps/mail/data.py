"""The webmail's schema and its deterministic seed: four users of one company, each with a mailbox of a few dozen messages, threads, labels and contacts.

Everything is drawn from a fixed-seed ``random.Random`` per user, so every process builds the
same rows; task templates read the seeded database to pick their instances.
"""

from __future__ import annotations

import datetime
import random
from dataclasses import dataclass

from agentgym.envs.state import SQLiteState

__all__ = ["SCHEMA", "USERS", "PEOPLE", "FOLDERS", "Person", "seed", "DOMAIN"]

SCHEMA = """
CREATE TABLE users (username TEXT PRIMARY KEY, password TEXT NOT NULL, display_name TEXT NOT NULL,
                    email TEXT NOT NULL UNIQUE, signature TEXT NOT NULL, page_size INTEGER NOT NULL);
CREATE TABLE contacts (id INTEGER PRIMARY KEY, owner TEXT NOT NULL, name TEXT NOT NULL, email TEXT NOT NULL,
                       phone TEXT NOT NULL, company TEXT NOT NULL, notes TEXT NOT NULL);
CREATE TABLE messages (id INTEGER PRIMARY KEY, owner TEXT NOT NULL, folder TEXT NOT NULL, thread_id INTEGER,
                       in_reply_to INTEGER, sender_name TEXT NOT NULL, sender_email TEXT NOT NULL,
                       to_addrs TEXT NOT NULL, cc_addrs TEXT NOT NULL, subject TEXT NOT NULL, body TEXT NOT NULL,
                       sent_at TEXT NOT NULL, is_read INTEGER NOT NULL, is_starred INTEGER NOT NULL);
CREATE INDEX messages_owner ON messages (owner, folder, sent_at);
CREATE TABLE labels (id INTEGER PRIMARY KEY, owner TEXT NOT NULL, name TEXT NOT NULL, UNIQUE (owner, name));
CREATE TABLE message_labels (message_id INTEGER NOT NULL, label_id INTEGER NOT NULL,
                             PRIMARY KEY (message_id, label_id));
"""

#: The mailbox folders every user has (labels are extra, per user).
FOLDERS = ("inbox", "sent", "archive", "trash")

DOMAIN = "larkspur.test"


@dataclass(frozen=True)
class Person:
    name: str
    email: str
    company: str

    @property
    def first(self) -> str:
        return self.name.split()[0]


#: The app's users: (username, password, person).
USERS = (
    ("alice", "alice-pw", Person("Alice Moreau", f"alice@{DOMAIN}", "Larkspur")),
    ("bob", "bob-pw", Person("Bob Okafor", f"bob@{DOMAIN}", "Larkspur")),
    ("carol", "carol-pw", Person("Carol Jensen", f"carol@{DOMAIN}", "Larkspur")),
    ("dan", "dan-pw", Person("Dan Whitaker", f"dan@{DOMAIN}", "Larkspur")),
)

_EXTERNAL = (
    ("Grace Kim", "orbitlabs", "Orbit Labs"),
    ("Lena Fischer", "brightpath", "Brightpath"),
    ("Marcus Reyes", "reyesdesign", "Reyes Design"),
    ("Priya Natarajan", "vertexcloud", "Vertex Cloud"),
    ("Tomas Berg", "nordlys", "Nordlys Shipping"),
    ("Hannah Cole", "colepartners", "Cole & Partners"),
    ("Ivan Petrov", "kestrelsec", "Kestrel Security"),
    ("Julia Santos", "maretravel", "Maré Travel"),
    ("Kenji Watanabe", "sakuraparts", "Sakura Components"),
    ("Olivia Brooks", "brookslegal", "Brooks Legal"),
    ("Samuel Adeyemi", "lagoonfinance", "Lagoon Finance"),
    ("Nora Lindqvist", "fjordanalytics", "Fjord Analytics"),
    ("Rafael Ortiz", "cactuscatering", "Cactus Catering"),
    ("Mei Chen", "jadeprint", "Jade Printworks"),
    ("Victor Dubois", "lumiere-events", "Lumière Events"),
    ("Zara Ahmed", "crescenthire", "Crescent Recruiting"),
    ("Ethan Walsh", "walshconsulting", "Walsh Consulting"),
    ("Sofia Rossi", "velamedia", "Vela Media"),
    ("Daniel Novak", "bridgewater-audit", "Bridgewater Audit"),
    ("Amara Okonkwo", "baobablogistics", "Baobab Logistics"),
)

#: Everyone who writes mail in the seed: the external correspondents, then the users.
PEOPLE = tuple(
    Person(name, f"{name.split()[0].lower()}.{name.split()[1].lower()}@{domain}.test", company)
    for name, domain, company in _EXTERNAL
) + tuple(person for _, _, person in USERS)

_PROJECTS = ("Atlas", "Borealis", "Cobalt", "Delta", "Ember", "Falcon", "Granite", "Harbor", "Iris", "Juniper")
_KINDS = (
    "budget review",
    "launch checklist",
    "design feedback",
    "invoice",
    "weekly status",
    "vendor contract",
    "hiring plan",
    "offsite agenda",
    "security audit",
    "release notes",
    "customer escalation",
    "roadmap draft",
)
_VENUES = (
    "the Orchid Room",
    "Harbor Hall",
    "the Cedar Lodge",
    "the Lighthouse Loft",
    "Maple Court",
    "the Granary",
    "Studio Nine",
    "the Glasshouse",
)
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
_LABELS = ("Clients", "Finance", "Travel", "Follow up", "Important", "Team")
_EPOCH = datetime.datetime(2026, 1, 5, 9, 0)


def _body(kind: str, project: str, sender: Person, recipient: Person, rng: random.Random, ref: str) -> str:
    """A message body: kind-specific details (amounts, venues, versions) plus a unique reference code."""
    amount = f"${rng.randint(12, 480) * 25:,}"
    day = f"{rng.choice(_WEEKDAYS)} {rng.randint(6, 28)} January"
    details = {
        "budget review": f"The revised {project} budget comes to {amount} for the quarter. "
        f"Please flag anything that looks off before {day}.",
        "launch checklist": f"The {project} launch is scheduled for {day}. Everything on the checklist is green "
        f"except the final copy review.",
        "design feedback": f"I went through the {project} mockups. The navigation feels crowded; could we try "
        f"a simpler header before {day}?",
        "invoice": f"Please find the {project} invoice attached. Amount due: {amount}, payable by {day}.",
        "weekly status": f"{project} is on track this week. Two tickets slipped to next sprint; the demo is "
        f"still planned for {day}.",
        "vendor contract": f"The draft vendor contract for {project} is ready for signature. The annual fee is "
        f"{amount}.",
        "hiring plan": f"For {project} we would like to open {rng.randint(2, 6)} new positions. Interviews could "
        f"start on {day}.",
        "offsite agenda": f"The {project} offsite will be held at {rng.choice(_VENUES)} on {day}. Agenda to follow.",
        "security audit": f"The {project} security audit found {rng.randint(2, 9)} medium-severity issues. "
        f"The full report is due {day}.",
        "release notes": f"Release notes for {project} version {rng.randint(2, 7)}.{rng.randint(0, 9)} are "
        f"attached. Highlights: faster sync and a new export dialog.",
        "customer escalation": f"A customer escalated an outage on {project}. Can we get a status update to "
        f"them by {day}?",
        "roadmap draft": f"Here is the first draft of the {project} roadmap. The big item is the mobile app in "
        f"the second quarter.",
    }[kind]
    return f"Hi {recipient.first},\n\n{details}\n\nReference: {ref}\n\nBest,\n{sender.first}"


def _reply_body(sender: Person, recipient: Person, rng: random.Random) -> str:
    line = rng.choice(
        (
            "Thanks, that works for me.",
            "Sounds good, let's go ahead.",
            "Could we move this by a week?",
            "Noted, I will follow up tomorrow.",
            "Thanks for the update. I have a couple of questions; let's discuss on Monday.",
        )
    )
    return f"Hi {recipient.first},\n\n{line}\n\nBest,\n{sender.first}"


def _addresses(people: list[Person]) -> str:
    return ", ".join(person.email for person in people)


def _phone(rng: random.Random) -> str:
    return f"+1 555 {rng.randint(100, 999)} {rng.randint(1000, 9999)}"


def seed(db: SQLiteState) -> None:
    """Create the schema and fill every user's mailbox, labels and contacts."""
    db.conn.executescript(SCHEMA)
    subjects = [f"{project} {kind}" for project in _PROJECTS for kind in _KINDS]
    refs = iter(random.Random(7).sample(range(1000, 9999), 2000))
    for index, (username, password, me) in enumerate(USERS):
        rng = random.Random(1000 + index)
        db.execute(
            "INSERT INTO users VALUES (?, ?, ?, ?, ?, ?)",
            (username, password, me.name, me.email, f"{me.name}\nLarkspur · {me.email}", 20),
        )
        colleagues = [p for _, _, p in USERS if p != me]
        externals = rng.sample(PEOPLE[: len(_EXTERNAL)], 11)
        correspondents = externals + colleagues
        label_ids = []
        for name in rng.sample(_LABELS, 3):
            label_ids.append(db.execute("INSERT INTO labels (owner, name) VALUES (?, ?)", (username, name)).lastrowid)
        # Contacts: most correspondents plus two people who never wrote (forward and compose targets).
        others = [p for p in PEOPLE[: len(_EXTERNAL)] if p not in externals]
        for person in sorted(externals[:8] + colleagues + rng.sample(others, 2), key=lambda p: p.name):
            notes = rng.choice(("", "Met at the autumn conference.", "Prefers email over calls.", "Main contact."))
            db.execute(
                "INSERT INTO contacts (owner, name, email, phone, company, notes) VALUES (?, ?, ?, ?, ?, ?)",
                (username, person.name, person.email, _phone(rng), person.company, notes),
            )

        pool = rng.sample(subjects, 72)
        minutes = rng.sample(range(0, 62 * 24 * 60, 7), 80)  # distinct send times over two months
        start = _EPOCH - datetime.timedelta(days=64)
        rows = []  # (sent_at, fields) collected first so that ids follow time order

        def add(
            when: int,
            folder: str,
            sender: Person,
            to: list[Person],
            cc: list[Person],
            subject: str,
            body: str,
            read: bool,
            starred: bool,
            parent: int | None = None,
        ) -> int:
            # Called only within this user's iteration, so the loop's rows and start are the right ones.
            rows.append(  # noqa: B023
                (start + datetime.timedelta(minutes=when), folder, sender, to, cc, subject, body, read, starred, parent)  # noqa: B023
            )
            return len(rows) - 1  # noqa: B023

        for number, subject in enumerate(pool[:62]):
            project, kind = subject.split(" ", 1)
            sender = (
                correspondents[min(int(rng.expovariate(0.25)), len(correspondents) - 1)]
                if rng.random() < 0.8
                else rng.choice(correspondents)
            )
            cc = rng.sample([p for p in correspondents if p != sender], rng.choice((0, 0, 1, 2)))
            folder = rng.choices(("inbox", "archive", "trash"), (74, 20, 6))[0]
            when = minutes[number]
            root = add(
                when,
                folder,
                sender,
                [me],
                cc,
                subject,
                _body(kind, project, sender, me, rng, f"REF-{next(refs)}"),
                read=rng.random() < 0.6,
                starred=rng.random() < 0.15,
            )
            if folder != "trash" and rng.random() < 0.25:  # a conversation: my reply, maybe a follow-up
                rows[root] = rows[root][:7] + (True,) + rows[root][8:]
                reply_at = when + rng.randint(30, 600)
                add(
                    reply_at,
                    "sent",
                    me,
                    [sender],
                    cc,
                    f"Re: {subject}",
                    _reply_body(me, sender, rng),
                    True,
                    False,
                    root,
                )
                if rng.random() < 0.7:
                    writer = rng.choice([sender] + cc)
                    add(
                        reply_at + rng.randint(20, 900),
                        folder,
                        writer,
                        [me],
                        [p for p in [sender] + cc if p != writer],
                        f"Re: {subject}",
                        _reply_body(writer, me, rng),
                        rng.random() < 0.5,
                        False,
                        root,
                    )
        for number, subject in enumerate(pool[62:]):  # mail I started
            project, kind = subject.split(" ", 1)
            to = rng.choice(correspondents)
            add(
                minutes[62 + number],
                "sent",
                me,
                [to],
                [],
                subject,
                _body(kind, project, me, to, rng, f"REF-{next(refs)}"),
                True,
                False,
            )

        order = sorted(range(len(rows)), key=lambda i: rows[i][0])
        ids: dict[int, int] = {}
        for i in order:
            sent_at, folder, sender, recipients, cc, subject, body, read, starred, parent = rows[i]
            cursor = db.execute(
                "INSERT INTO messages (owner, folder, in_reply_to, sender_name, sender_email, to_addrs, cc_addrs,"
                " subject, body, sent_at, is_read, is_starred) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    username,
                    folder,
                    ids.get(parent),
                    sender.name,
                    sender.email,
                    _addresses(recipients),
                    _addresses(cc),
                    subject,
                    body,
                    sent_at.isoformat(sep=" ", timespec="minutes"),
                    int(read),
                    int(starred),
                ),
            )
            ids[i] = cursor.lastrowid
            thread = ids[parent] if parent is not None else ids[i]
            db.execute("UPDATE messages SET thread_id = ? WHERE id = ?", (thread, ids[i]))
            if folder != "sent" and rng.random() < 0.18:
                db.execute("INSERT INTO message_labels VALUES (?, ?)", (ids[i], rng.choice(label_ids)))
