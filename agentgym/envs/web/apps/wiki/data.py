"""The wiki's schema and its deterministic seed: users, categories, pages with histories, tags and an audit log.

The seed is generated once from a fixed-seed ``random.Random`` as plain Python objects
(:func:`seed`), so the app's database and the task templates read the very same facts.
"""

from __future__ import annotations

import datetime
import random
import re
from dataclasses import dataclass, field
from functools import cache

SCHEMA = """
CREATE TABLE users (id INTEGER PRIMARY KEY, username TEXT UNIQUE NOT NULL, name TEXT NOT NULL,
                    password TEXT NOT NULL, role TEXT NOT NULL CHECK (role IN ('reader', 'editor', 'admin')));
CREATE TABLE categories (id INTEGER PRIMARY KEY, slug TEXT UNIQUE NOT NULL, name TEXT UNIQUE NOT NULL,
                         description TEXT NOT NULL);
-- Deleted pages keep their row (deleted = 1): titles and slugs are unique among live pages only.
CREATE TABLE pages (id INTEGER PRIMARY KEY, slug TEXT NOT NULL, title TEXT NOT NULL,
                    category_id INTEGER NOT NULL REFERENCES categories(id), body TEXT NOT NULL,
                    protection TEXT NOT NULL CHECK (protection IN ('everyone', 'editors', 'admins')),
                    deleted INTEGER NOT NULL DEFAULT 0, updated TEXT NOT NULL);
CREATE TABLE revisions (id INTEGER PRIMARY KEY, page_id INTEGER NOT NULL REFERENCES pages(id), num INTEGER NOT NULL,
                        body TEXT NOT NULL, author TEXT NOT NULL, created TEXT NOT NULL, summary TEXT NOT NULL,
                        UNIQUE (page_id, num));
CREATE TABLE page_tags (page_id INTEGER NOT NULL REFERENCES pages(id), tag TEXT NOT NULL, PRIMARY KEY (page_id, tag));
CREATE TABLE redirects (slug TEXT PRIMARY KEY, page_id INTEGER NOT NULL REFERENCES pages(id));
CREATE TABLE audit (id INTEGER PRIMARY KEY, at TEXT NOT NULL, actor TEXT NOT NULL, action TEXT NOT NULL,
                    target TEXT NOT NULL, detail TEXT NOT NULL);
-- Edits the wiki refused a signed-in user (no page shows them): a grader's evidence that an edit was tried.
CREATE TABLE refused_edits (id INTEGER PRIMARY KEY, at TEXT NOT NULL, actor TEXT NOT NULL,
                            page_id INTEGER NOT NULL REFERENCES pages(id));
"""

ROLES = ("reader", "editor", "admin")
PROTECTIONS = ("everyone", "editors", "admins")
#: How each protection level reads in the UI.
PROTECTION_LABELS = {"everyone": "Everyone", "editors": "Editors and admins", "admins": "Admins only"}
#: Audit actions, as the audit log's filter offers them.
AUDIT_ACTIONS = (
    "create page",
    "edit page",
    "revert page",
    "rename page",
    "delete page",
    "protect page",
    "change role",
    "create category",
    "login",
)

_USERS = [  # username, display name, role
    ("alice", "Alice Moreau", "admin"),
    ("bruno", "Bruno Silva", "admin"),
    ("chen", "Chen Wei", "admin"),
    ("dara", "Dara Okafor", "editor"),
    ("emeka", "Emeka Obi", "editor"),
    ("farah", "Farah Haddad", "editor"),
    ("gus", "Gus Lindqvist", "editor"),
    ("hana", "Hana Sato", "editor"),
    ("ivan", "Ivan Petrov", "editor"),
    ("jules", "Jules Martin", "editor"),
    ("kofi", "Kofi Mensah", "reader"),
    ("lena", "Lena Vogel", "reader"),
    ("milo", "Milo Rossi", "reader"),
    ("nadia", "Nadia Karim", "reader"),
    ("oscar", "Oscar Lund", "reader"),
    ("priya", "Priya Nair", "reader"),
    ("quinn", "Quinn Adler", "reader"),
    ("rosa", "Rosa Lopez", "reader"),
]

_CATEGORIES = {  # name -> (description, page titles)
    "Engineering": (
        "How we build and ship software.",
        [
            "Code Review Guide",
            "Release Process",
            "Feature Flags",
            "Database Migrations",
            "API Versioning",
            "Logging Standards",
            "Testing Strategy",
            "Caching Layer",
            "CI Pipeline",
            "Dependency Updates",
            "Error Budgets",
            "Monorepo Layout",
            "Build Cache",
        ],
    ),
    "Operations": (
        "Running production systems day to day.",
        [
            "On-call Rotation",
            "Incident Response",
            "Backup Schedule",
            "Capacity Planning",
            "Status Page",
            "Maintenance Windows",
            "Alert Tuning",
            "Disaster Recovery",
            "Runbook Index",
            "Postmortem Template",
            "Paging Policy",
        ],
    ),
    "Onboarding": (
        "Everything a new hire needs in the first weeks.",
        [
            "First Week Checklist",
            "Laptop Setup",
            "Accounts and Access",
            "Team Directory",
            "Buddy Program",
            "Office Tour",
            "Expense Basics",
            "Glossary of Terms",
            "Engineering Onboarding",
            "Meeting Culture",
        ],
    ),
    "Security": (
        "Policies and practices that keep us safe.",
        [
            "Password Policy",
            "Access Reviews",
            "Secrets Management",
            "Vulnerability Disclosure",
            "Phishing Awareness",
            "Device Encryption",
            "Vendor Security Review",
            "Data Classification",
            "Audit Logging",
            "Key Rotation",
            "Security Champions",
        ],
    ),
    "Product": (
        "Product strategy, roadmaps and specs.",
        [
            "Product Roadmap",
            "Pricing Tiers",
            "Feature Request Process",
            "Customer Personas",
            "Launch Checklist",
            "Beta Program",
            "Usage Analytics",
            "Mobile App Strategy",
            "Accessibility Goals",
            "Naming Guidelines",
            "Deprecation Policy",
        ],
    ),
    "Design": (
        "The design system and how designers work.",
        [
            "Design System",
            "Color Palette",
            "Icon Library",
            "Typography Scale",
            "Design Reviews",
            "Prototyping Tools",
            "User Research Panel",
            "Illustration Style",
            "Motion Principles",
        ],
    ),
    "People": (
        "HR policies, benefits and time off.",
        [
            "Vacation Policy",
            "Parental Leave",
            "Remote Work",
            "Performance Reviews",
            "Learning Budget",
            "Hiring Process",
            "Interview Rubric",
            "Referral Bonus",
            "Code of Conduct",
            "Wellness Stipend",
            "Promotion Criteria",
        ],
    ),
    "Finance": (
        "Budgets, purchasing and reimbursements.",
        [
            "Purchasing Rules",
            "Travel Reimbursement",
            "Budget Calendar",
            "Corporate Cards",
            "Invoice Approval",
            "Software Subscriptions",
            "Quarterly Forecast",
            "Petty Cash",
        ],
    ),
    "Support": (
        "Helping customers and handling tickets.",
        [
            "Ticket Triage",
            "Refund Guidelines",
            "Escalation Matrix",
            "Support Macros",
            "Customer Health Scores",
            "SLA Targets",
            "Knowledge Base Style",
            "Chat Support Hours",
            "Bug Report Template",
            "VIP Accounts",
        ],
    ),
    "Sales": (
        "How we find and close deals.",
        [
            "Sales Playbook",
            "Discount Approval",
            "Demo Environment",
            "Lead Scoring",
            "Contract Templates",
            "Territory Map",
            "Partner Program",
            "Renewal Process",
            "Competitor Notes",
        ],
    ),
}

TAGS = (
    "how-to",
    "policy",
    "draft",
    "needs-review",
    "runbook",
    "faq",
    "checklist",
    "reference",
    "meeting-notes",
    "deprecated",
    "templates",
    "glossary",
    "roadmap",
    "outdated",
    "featured",
    "quarterly",
    "legal",
    "tooling",
)

TOOLS = (
    "Jenkins",
    "Grafana",
    "Terraform",
    "Kafka",
    "Redis",
    "Postgres",
    "Jira",
    "Figma",
    "Salesforce",
    "Zendesk",
    "Okta",
    "Vault",
    "Sentry",
    "Airflow",
    "Looker",
    "Notion",
)
TEAMS = ("Platform", "Payments", "Growth", "Mobile", "Data", "Trust", "Billing", "Search", "Infra", "Web")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
UNITS = ("minute", "hour", "day", "week")

_SENTENCES = (
    "{title} is owned by the {team} team.",
    "Questions about {topic} go to the #{channel} channel.",
    "The {team} team reviews {topic} changes every {weekday}.",
    "We track {topic} work in {tool}.",
    "Dashboards for {topic} live in {tool}.",
    "The current limit for {topic} is {n} requests per {unit}.",
    "Approval from {person} is needed for {topic} changes over {n} units.",
    "Since {year}, {topic} has relied on {tool}.",
    "The target turnaround for {topic} is {small} business days.",
    "Room {room} hosts the weekly {topic} sync at {hour}:00.",
    "Escalations about {topic} go to {person} after {small} hours.",
    "The {topic} budget is capped at {n} thousand dollars per quarter.",
    "Anyone touching {topic} should read [[{other}]] first.",
    "Old {topic} notes were moved to {tool} in {year}.",
)

SEED_DELETED = 10  # pages that were deleted before the episode starts (only the audit log remembers them)
_EPOCH_START = datetime.datetime(2025, 1, 6, 9, 0)


@dataclass
class User:
    id: int
    username: str
    name: str
    password: str
    role: str


@dataclass
class Category:
    id: int
    slug: str
    name: str
    description: str


@dataclass
class Revision:
    num: int
    body: str
    author: str
    created: str
    summary: str
    #: Paragraph text -> the revision number that introduced it (for "which revision added T").
    introduced: dict = field(default_factory=dict)


@dataclass
class Page:
    id: int
    slug: str
    title: str
    category: Category
    protection: str
    tags: list[str]
    revisions: list[Revision]
    deleted: bool = False

    @property
    def body(self) -> str:
        return self.revisions[-1].body

    @property
    def updated(self) -> str:
        return self.revisions[-1].created


@dataclass
class AuditEntry:
    at: str
    actor: str
    action: str
    target: str
    detail: str


@dataclass
class Seed:
    users: list[User]
    categories: list[Category]
    pages: list[Page]
    audit: list[AuditEntry]

    def category(self, name: str) -> Category:
        return next(category for category in self.categories if category.name == name)

    def live_pages(self) -> list[Page]:
        return [page for page in self.pages if not page.deleted]


def slugify(title: str) -> str:
    """The URL name of a page or category title: lowercase words joined by hyphens."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def _stamp(moment: datetime.datetime) -> str:
    return moment.isoformat(sep=" ", timespec="minutes")


@cache
def seed() -> Seed:
    """The seeded wiki (the same objects every call)."""
    rng = random.Random(20260105)
    users = [User(i, username, name, f"{username}-pw", role) for i, (username, name, role) in enumerate(_USERS, 1)]
    editors = [user.username for user in users if user.role != "reader"]
    everyone = [user.username for user in users]
    categories = [
        Category(i, slugify(name), name, description)
        for i, (name, (description, _)) in enumerate(_CATEGORIES.items(), 1)
    ]
    all_titles = [title for _, titles in _CATEGORIES.values() for title in titles]
    used_sentences: set[str] = set()

    def sentence(title: str) -> str:
        while True:
            text = rng.choice(_SENTENCES).format(
                title=title,
                topic=title.lower(),
                team=rng.choice(TEAMS),
                channel=slugify(title),
                weekday=rng.choice(WEEKDAYS),
                tool=rng.choice(TOOLS),
                n=rng.randrange(10, 500),
                unit=rng.choice(UNITS),
                person=rng.choice(users).name,
                year=rng.randrange(2015, 2026),
                small=rng.randrange(2, 15),
                room=rng.randrange(100, 700),
                hour=rng.randrange(8, 18),
                other=rng.choice([t for t in all_titles if t != title]),
            )
            if text not in used_sentences:
                used_sentences.add(text)
                return text

    pages: list[Page] = []
    page_id = 0
    for category in categories:
        for title in _CATEGORIES[category.name][1]:
            page_id += 1
            protection = rng.choices(PROTECTIONS, weights=(7, 2, 1))[0]
            tags = sorted(rng.sample(TAGS, rng.randint(1, 3)))
            pages.append(Page(page_id, slugify(title), title, category, protection, tags, []))
    # Edits happen over 2025, pages interleaved: a shuffled schedule of turns, then times in order.
    schedule = [page for page in pages for _ in range(rng.randint(2, 8))]
    rng.shuffle(schedule)
    minutes = sorted(rng.sample(range(0, 340 * 24 * 60, 7), len(schedule)))
    audit: list[AuditEntry] = []
    for page, minute in zip(schedule, minutes):  # a page's first turn creates it
        created = _stamp(_EPOCH_START + datetime.timedelta(minutes=minute))
        pool = everyone if page.protection == "everyone" else editors
        if page.protection == "admins":
            pool = [user.username for user in users if user.role == "admin"]
        author = rng.choice(pool)
        if not page.revisions:
            paragraphs = [sentence(page.title) for _ in range(rng.randint(2, 3))]
            introduced = {text: 1 for text in paragraphs}
            summary = "Created page"
        else:
            paragraphs = page.body.split("\n\n")
            introduced = dict(page.revisions[-1].introduced)
            kind = rng.choices(("add", "change", "remove"), weights=(6, 3, 1 if len(paragraphs) > 2 else 0))[0]
            if kind == "add":
                new = sentence(page.title)
                paragraphs.insert(rng.randint(1, len(paragraphs)), new)
                summary = rng.choice(("Added a note", "More detail", "Expanded section", "New info"))
            elif kind == "change":
                index = rng.randrange(len(paragraphs))
                introduced.pop(paragraphs[index])
                new = sentence(page.title)
                paragraphs[index] = new
                summary = rng.choice(("Updated details", "Corrected facts", "Refreshed", "Fixed outdated info"))
            else:
                introduced.pop(paragraphs.pop(rng.randrange(len(paragraphs))))
                new = None
                summary = rng.choice(("Removed stale line", "Trimmed", "Cleanup"))
            if new is not None:
                introduced[new] = len(page.revisions) + 1
        num = len(page.revisions) + 1
        page.revisions.append(Revision(num, "\n\n".join(paragraphs), author, created, summary, introduced))
        audit.append(
            AuditEntry(
                created, author, "create page" if num == 1 else "edit page", page.title, f"revision {num}: {summary}"
            )
        )

    # Some history the audit log alone remembers: deletions, role changes and protections.
    admins = [user.username for user in users if user.role == "admin"]
    last = _EPOCH_START + datetime.timedelta(minutes=minutes[-1])
    extra_times = sorted(rng.sample(range(1, 20 * 24 * 60), 40))
    events = []
    for page in rng.sample(pages, SEED_DELETED):
        page.deleted = True
        events.append(
            (
                "delete page",
                page.title,
                rng.choice(("Duplicate page", "Obsolete", "Moved elsewhere", "Out of date", "Created by mistake")),
            )
        )
    for user in rng.sample([u for u in users if u.role != "admin"], 8):
        before = "reader" if user.role == "editor" else "editor"
        events.append(("change role", user.username, f"{before} -> {user.role}"))
    for page in rng.sample([p for p in pages if p.protection != "everyone" and not p.deleted], 8):
        events.append(("protect page", page.title, f"everyone -> {page.protection}"))
    rng.shuffle(events)
    for (action, target, detail), minute in zip(events, extra_times):
        # The deletion of a page comes after its last edit (they all happen after the edit schedule).
        audit.append(
            AuditEntry(_stamp(last + datetime.timedelta(minutes=minute)), rng.choice(admins), action, target, detail)
        )
    return Seed(users, categories, pages, audit)


def build(db) -> None:
    """Create the schema and insert :func:`seed` into ``db`` (a SQLiteState)."""
    data = seed()
    db.conn.executescript(SCHEMA)
    db.conn.executemany(
        "INSERT INTO users VALUES (?, ?, ?, ?, ?)", [(u.id, u.username, u.name, u.password, u.role) for u in data.users]
    )
    db.conn.executemany(
        "INSERT INTO categories VALUES (?, ?, ?, ?)", [(c.id, c.slug, c.name, c.description) for c in data.categories]
    )
    for page in data.pages:
        db.conn.execute(
            "INSERT INTO pages VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                page.id,
                page.slug,
                page.title,
                page.category.id,
                page.body,
                page.protection,
                int(page.deleted),
                page.updated,
            ),
        )
        db.conn.executemany(
            "INSERT INTO revisions (page_id, num, body, author, created, summary) VALUES (?, ?, ?, ?, ?, ?)",
            [(page.id, r.num, r.body, r.author, r.created, r.summary) for r in page.revisions],
        )
        db.conn.executemany("INSERT INTO page_tags VALUES (?, ?)", [(page.id, tag) for tag in page.tags])
    db.conn.executemany(
        "INSERT INTO audit (at, actor, action, target, detail) VALUES (?, ?, ?, ?, ?)",
        [(a.at, a.actor, a.action, a.target, a.detail) for a in sorted(data.audit, key=lambda a: a.at)],
    )
