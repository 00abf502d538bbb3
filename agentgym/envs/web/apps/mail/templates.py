"""The webmail's task templates: each reads the seeded database, picks its instances with a fixed-seed RNG, and pairs a goal with a WebArena-style evaluator and a scripted reference solution.

Solutions act through the UI only — the quick search box, the advanced search form, links,
buttons and forms — and look every element up by role and name in the observation text.
Templates are listed in :data:`TEMPLATES`; :func:`tasks` instantiates them all.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterator
from urllib.parse import quote

from agentgym.envs.state import SQLiteState
from agentgym.envs.web.apps.mail.app import MailApp
from agentgym.envs.web.apps.mail.data import FOLDERS, USERS
from agentgym.envs.web.apps.mail.views import FOLDER_TITLES
from agentgym.envs.web.observation import element_id
from agentgym.envs.web.tasks import AllOf, AnswerExact, AnswerIncludes, AnswerNumber, DbCheck, Step, UrlMatch, WebTask

__all__ = ["tasks", "TEMPLATES"]

#: Messages the task's actions create are stamped by the logical clock, which starts here.
_NEW = "2026-01-05 09:00"
#: Instances per template (fewer where the seed has fewer distinct goals).
_PER_TEMPLATE = 12
_TEXTS = (
    "Thanks, I will review it today.",
    "Sounds good to me, let's proceed.",
    "Can we discuss this on Thursday?",
    "Please send me the final version.",
    "I am out until Monday; I will reply then.",
    "Looks great, approved.",
    "Could you add the numbers for last quarter?",
    "Received, thank you.",
    "Let me check with the team and come back to you.",
    "Count me in.",
    "I have a few comments; call me.",
    "Please loop in finance as well.",
)
_NEW_LABELS = (
    "Urgent",
    "Receipts",
    "Partners",
    "Waiting",
    "Board",
    "Q1 planning",
    "Later",
    "Vendors",
    "Hiring",
    "Reading",
    "Legal",
    "Events",
)
_NEW_PEOPLE = (
    ("Yusuf Demir", "yusuf.demir@tidewater.test"),
    ("Elena Popescu", "elena.p@carpathia.test"),
    ("Liam O'Brien", "liam.obrien@greenisle.test"),
    ("Chloe Martin", "chloe.martin@ateliercm.test"),
    ("Arjun Mehta", "arjun@mehtaworks.test"),
    ("Freya Nilsen", "freya.nilsen@polarbyte.test"),
    ("Diego Alvarez", "diego.alvarez@pampas.test"),
    ("Aiko Tanaka", "aiko.tanaka@kumo.test"),
    ("Noah Schwartz", "noah@schwartzlaw.test"),
    ("Isabel Ferreira", "isabel.f@lisboaviva.test"),
    ("Omar Haddad", "omar.haddad@cedarnet.test"),
    ("Ruth Abebe", "ruth.abebe@highlandcoffee.test"),
)
_SIGNATURES = (
    "Best regards, {first}",
    "Cheers,\n{first}",
    "{name} | Larkspur",
    "Sent from my desk — {first}",
    "Thanks!\n{name}",
    "Kind regards,\n{name}\nLarkspur Operations",
    "{first} (she/her)",
    "— {first}, Larkspur",
    "Talk soon,\n{first}",
    "{name}\nPlease excuse typos.",
    "Warmly, {first}",
    "{name}, Team Lead",
)


# ------------------------------------------------------------------ solution steps
def _q(text: str) -> str:
    return json.dumps(text)


def click(role: str, name: str, nth: int = 0) -> Step:
    return lambda obs: f"click({element_id(obs, role, name, nth=nth)})"


def fill(role: str, name: str, text: str) -> Step:
    return lambda obs: f"fill({element_id(obs, role, name)}, {_q(text)})"


def choose(name: str, option: str) -> Step:
    return lambda obs: f"select_option({element_id(obs, 'combobox', name)}, {_q(option)})"


def tick(name: str) -> Step:
    return lambda obs: f"check({element_id(obs, 'checkbox', name)})"


def answer(text: str = "") -> str:
    return f"answer({_q(text)})"


def search(text: str) -> tuple[Step, ...]:
    """The quick search box at the top of every mail page."""
    return fill("searchbox", "Search mail", text), 'press("Enter")'


def advanced_search(sender: str, folder: str = "", unread: bool = False) -> tuple[Step, ...]:
    steps: list[Step] = [click("link", "Advanced search"), fill("textbox", "From", sender)]
    if folder:
        steps.append(choose("Folder", FOLDER_TITLES[folder]))
    if unread:
        steps.append(tick("Unread only"))
    return (*steps, click("button", "Search"))


def open_message(subject: str) -> tuple[Step, ...]:
    return (*search(subject), click("link", subject))


def listed_count(obs: str) -> str:
    """The total on a message list page ("Showing 1–3 of 3 messages")."""
    return re.search(r"of (\d+) messages", obs).group(1)


# ------------------------------------------------------------------ reading the seed
class Seed:
    """Queries on the pristine database that templates share."""

    def __init__(self, db: SQLiteState):
        self.db = db
        self.users = {username: person for username, _, person in USERS}

    def rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        return self.db.query(sql, params)

    def received(self, extra: str = "") -> list[tuple]:
        """(owner, id, subject, sender_name, sender_email, folder) of received, not deleted mail."""
        return self.rows(
            "SELECT owner, id, subject, sender_name, sender_email, folder FROM messages WHERE "
            f"folder IN ('inbox', 'archive') {extra} ORDER BY owner, id"
        )


def _instances(
    name: str, candidates: list, make: Callable[..., tuple], count: int = _PER_TEMPLATE
) -> Iterator[WebTask]:
    """Tasks ``name/0..`` from ``make(candidate) -> (user, goal, evaluator, solution)``, one per distinct goal.

    Candidates are shuffled with a seed of the template's name, so instances spread over users and
    senders instead of following table order.
    """
    goals: set[str] = set()
    shuffled = random.Random(f"mail/{name}").sample(list(candidates), len(candidates))
    for candidate in shuffled:
        if len(goals) == count:
            break
        user, goal, evaluator, solution = make(candidate)
        if goal in goals:  # the same question for another user's mailbox
            continue
        yield WebTask(
            f"{name}/{len(goals)}",
            name,
            goal,
            evaluator,
            tuple(solution),
            start_path="/folder/inbox",
            user=user,
            params={"candidate": candidate},
        )
        goals.add(goal)


def _naming(seed: Seed, owner: str, *names: str) -> AnswerIncludes:
    """An answer naming these people and nobody else who appears in the mail or the contacts (the owner aside)."""
    everyone = {name for (name,) in seed.rows("SELECT sender_name FROM messages UNION SELECT name FROM contacts")}
    return AnswerIncludes(names, tuple(sorted(everyone - set(names) - {seed.users[owner].name})))


def _sent_check(owner: str, columns: str, expected: tuple, params: tuple = (), description: str = "") -> DbCheck:
    """Exactly one message sent during the task, with these column values."""
    return DbCheck(
        f"SELECT {columns} FROM messages WHERE owner = ? AND folder = 'sent' AND sent_at >= ? ORDER BY id",
        (expected,),
        params + (owner, _NEW),
        description,
    )


# ------------------------------------------------------------------ information seeking
def sender_of_subject(seed: Seed):
    def make(row):
        owner, _, subject, sender, *_ = row
        return (
            owner,
            f"Who sent me the email with the subject “{subject}”?",
            _naming(seed, owner, sender),
            (*open_message(subject), answer(sender)),
        )

    return _instances("sender_of_subject", seed.received("AND subject NOT LIKE 'Re:%'"), make)


def sender_of_reference(seed: Seed):
    rows = [
        (owner, sender, re.search(r"REF-\d+", body).group())
        for owner, sender, body in seed.rows(
            "SELECT owner, sender_name, body FROM messages WHERE folder IN ('inbox', 'archive') AND body LIKE '%REF-%'"
        )
    ]

    def make(row):
        owner, sender, ref = row
        return (
            owner,
            f"Somebody sent me a message that mentions the reference {ref}. What is their name?",
            _naming(seed, owner, sender),
            (*search(ref), answer(sender)),
        )

    return _instances("sender_of_reference", rows, make)


def unread_from_count(seed: Seed):
    rows = seed.rows(
        "SELECT owner, sender_name, SUM(is_read = 0) FROM messages WHERE folder = 'inbox' "
        "GROUP BY owner, sender_name HAVING SUM(is_read = 0) > 0"
    )

    def make(row):
        owner, sender, count = row
        return (
            owner,
            f"How many unread messages from {sender} are in my inbox?",
            AnswerNumber(count),
            (*advanced_search(sender, "inbox", unread=True), lambda obs: answer(listed_count(obs))),
        )

    return _instances("unread_from_count", rows, make)


def latest_subject_from(seed: Seed):
    rows = seed.rows(
        "SELECT owner, sender_name, subject FROM messages m WHERE folder IN ('inbox', 'archive') AND "
        "sent_at = (SELECT MAX(sent_at) FROM messages n WHERE n.owner = m.owner AND n.folder IN "
        "('inbox', 'archive') AND n.sender_email = m.sender_email)"
    )

    def make(row):
        owner, sender, subject = row
        return (
            owner,
            f"What is the subject of the most recent email {sender} sent me?",
            AnswerExact(subject),
            (*search(sender), answer(subject)),
        )

    return _instances("latest_subject_from", rows, make)


def oldest_in_folder(seed: Seed):
    filters = {"all": "", "unread": " AND is_read = 0", "starred": " AND is_starred = 1"}
    rows = []
    for owner, *_rest in USERS:
        for folder in ("inbox", "archive", "sent"):
            for show, where in filters.items():
                found = seed.rows(
                    f"SELECT subject, COUNT(*) OVER () FROM messages WHERE owner = ? AND folder = ?"
                    f"{where} ORDER BY sent_at, id LIMIT 1",
                    (owner, folder),
                )
                if found:
                    rows.append((owner, folder, show, *found[0]))

    def make(row):
        owner, folder, show, subject, count = row
        adjective = "" if show == "all" else f"{show} "
        steps: list[Step] = [click("link", FOLDER_TITLES[folder])]
        if show != "all":
            steps.append(click("link", show.title()))
        steps += [click("link", "Next page")] * ((count - 1) // 20)
        return (
            owner,
            f"What is the subject of the oldest {adjective}message in my {FOLDER_TITLES[folder].lower()} folder?",
            AnswerExact(subject),
            (*steps, answer(subject)),
        )

    return _instances("oldest_in_folder", rows, make)


def thread_last_writer(seed: Seed):
    rows = seed.rows(
        "SELECT r.owner, r.subject, (SELECT sender_name FROM messages t WHERE t.thread_id = r.id "
        "ORDER BY sent_at DESC LIMIT 1) FROM messages r WHERE r.folder IN ('inbox', 'archive') AND "
        "r.thread_id = r.id AND (SELECT COUNT(*) FROM messages t WHERE t.thread_id = r.id) >= 3"
    )

    def make(row):
        owner, subject, writer = row
        return (
            owner,
            f"In my conversation about “{subject}”, who wrote the latest message?",
            _naming(seed, owner, writer),
            (*open_message(subject), answer(writer)),
        )

    return _instances("thread_last_writer", rows, make)


def contact_phone(seed: Seed):
    rows = seed.rows("SELECT owner, name, phone FROM contacts")

    def make(row):
        owner, name, phone = row
        others = tuple(other for (other,) in seed.rows("SELECT phone FROM contacts WHERE owner = ?", (owner,)))
        return (
            owner,
            f"What is {name}'s phone number? It is in my contacts.",
            AnswerIncludes((phone,), others),
            (click("link", "Contacts"), answer(phone)),
        )

    return _instances("contact_phone", rows, make)


def invoice_amount(seed: Seed):
    rows = [
        (owner, subject, sender, float(re.search(r"Amount due: \$([\d,]+)", body).group(1).replace(",", "")))
        for owner, subject, sender, body in seed.rows(
            "SELECT owner, subject, sender_name, body FROM messages WHERE folder IN ('inbox', 'archive') AND "
            "subject LIKE '% invoice' AND subject NOT LIKE 'Re:%' AND sender_email NOT LIKE '%@larkspur.test'"
        )
    ]

    def make(row):
        owner, subject, sender, amount = row
        project = subject.split()[0]
        return (
            owner,
            f"How much is due on the {project} invoice that {sender} emailed me?",
            AnswerNumber(amount),
            (*open_message(subject), answer(f"${amount:,.0f}")),
        )

    return _instances("invoice_amount", rows, make)


def offsite_venue(seed: Seed):
    rows = [
        (owner, subject, re.search(r"held at (.+?) on (\w+ \d+ January)", body).groups())
        for owner, subject, body in seed.rows(
            "SELECT owner, subject, body FROM messages WHERE folder IN ('inbox', 'archive') AND "
            "subject LIKE '% offsite agenda' AND subject NOT LIKE 'Re:%'"
        )
    ]
    places_and_days = tuple(
        sorted({re.sub(r"^the ", "", venue) for *_, (venue, _) in rows} | {day for *_, (_, day) in rows})
    )

    def make(row):
        owner, subject, (venue, day) = row
        venue = re.sub(r"^the ", "", venue)
        project = subject.split()[0]
        return (
            owner,
            f"Where and on which day is the {project} offsite, according to my mail?",
            AnswerIncludes((venue, day), places_and_days),
            (*open_message(subject), answer(f"{venue}, {day}")),
        )

    return _instances("offsite_venue", rows, make)


def count_label(seed: Seed):
    rows = seed.rows(
        "SELECT l.owner, l.name, COUNT(*), SUM(m.is_read = 0) FROM labels l JOIN message_labels ml "
        "ON ml.label_id = l.id JOIN messages m ON m.id = ml.message_id GROUP BY l.id"
    )
    rows = [
        (owner, label, unread, count if not unread else unread_count)
        for owner, label, count, unread_count in rows
        for unread in (False, True)
    ]

    def make(row):
        owner, label, unread, count = row

        def reading(obs):
            if unread:  # the label's page marks each unread row; one page holds them all
                return answer(str(obs.count('cell "Unread"')))
            return answer(listed_count(obs))

        return (
            owner,
            f"How many {'unread ' if unread else ''}messages carry the label “{label}”?",
            AnswerNumber(count),
            (click("link", label), reading),
        )

    return _instances("count_label", rows, make)


# ------------------------------------------------------------------ navigation
def nav_search_sender(seed: Seed):
    rows = seed.rows("SELECT DISTINCT owner, sender_email FROM messages WHERE folder = 'inbox'")

    def make(row):
        owner, email = row
        return (
            owner,
            f"Open the search results for all mail from {email} (use the From field of the search).",
            UrlMatch("/search", (("from", email),)),
            (*advanced_search(email), answer()),
        )

    return _instances("nav_search_sender", rows, make)


def nav_search_text(seed: Seed):
    words = sorted(
        {
            subject
            for (subject,) in seed.rows(
                "SELECT subject FROM messages WHERE folder = 'inbox' AND subject NOT LIKE 'Re:%'"
            )
        }
    )
    rows = [(USERS[index % len(USERS)][0], word) for index, word in enumerate(words)]

    def make(row):
        owner, word = row
        return owner, f"Search my mail for “{word}”.", UrlMatch("/search", (("q", word),)), (*search(word), answer())

    return _instances("nav_search_text", rows, make)


def nav_filter(seed: Seed):
    combos = [
        (folder, show, sort)
        for folder in FOLDERS
        for show in ("unread", "starred")
        for sort in ("", "oldest")
        if (folder, show) != ("sent", "unread")
    ]
    rows = [(USERS[index % len(USERS)][0], *combo) for index, combo in enumerate(combos)]

    def make(row):
        owner, folder, show, sort = row
        steps = [click("link", FOLDER_TITLES[folder]), click("link", show.title())]
        if sort:
            steps.append(click("link", "Oldest first"))
        return (
            owner,
            f"Show me only the {show} messages in my {FOLDER_TITLES[folder].lower()} folder"
            + (", oldest first." if sort else "."),
            UrlMatch(f"/folder/{folder}", (("filter", show),) + ((("sort", sort),) if sort else ())),
            (*steps, answer()),
        )

    return _instances("nav_filter", rows, make)


def nav_open_message(seed: Seed):
    def make(row):
        owner, id_, subject, sender, *_ = row
        return (
            owner,
            f"Open the email “{subject}” from {sender}.",
            UrlMatch(f"/message/{id_}"),
            (*open_message(subject), answer()),
        )

    return _instances("nav_open_message", seed.received("AND subject NOT LIKE 'Re:%'"), make)


def nav_contact_edit(seed: Seed):
    rows = seed.rows("SELECT owner, id, name FROM contacts")

    def make(row):
        owner, id_, name = row
        return (
            owner,
            f"Take me to the page where I can edit my contact {name}.",
            UrlMatch(f"/contacts/{id_}"),
            (click("link", "Contacts"), click("link", f"Edit {name}"), answer()),
        )

    return _instances("nav_contact_edit", rows, make)


def nav_label(seed: Seed):
    rows = seed.rows("SELECT owner, name FROM labels")

    def make(row):
        owner, label = row
        return (
            owner,
            f"Show me the list of messages labelled “{label}”.",
            UrlMatch(f"/label/{quote(label)}"),
            (click("link", label), answer()),
        )

    return _instances("nav_label", rows, make)


# ------------------------------------------------------------------ changing state
def reply_latest_from(seed: Seed):
    rows = seed.rows(
        "SELECT owner, id, sender_name, sender_email, subject FROM messages m WHERE folder IN "
        "('inbox', 'archive') AND sent_at = (SELECT MAX(sent_at) FROM messages n WHERE n.owner = m.owner"
        " AND n.folder IN ('inbox', 'archive') AND n.sender_email = m.sender_email)"
    )

    def make(row):
        (owner, id_, sender, email, subject), text = row, _TEXTS[row[1] % len(_TEXTS)]
        reply = subject if subject.startswith("Re: ") else f"Re: {subject}"
        check = _sent_check(
            owner,
            "to_addrs, subject, in_reply_to, instr(body, ?) > 0",
            (email, reply, id_, 1),
            (text,),
            f"one reply to message {id_} sent to {email} containing {text!r}",
        )
        return (
            owner,
            f"Reply to the latest email from {sender} with the text “{text}”.",
            check,
            (
                *search(sender),
                click("link", subject),
                click("link", "Reply"),
                fill("textbox", "Body", text),
                click("button", "Send"),
                answer(),
            ),
        )

    return _instances("reply_latest_from", rows, make)


def reply_all(seed: Seed):
    rows = seed.received("AND cc_addrs != '' AND subject NOT LIKE 'Re:%'")

    def make(row):
        owner, id_, subject, sender, email, _ = row
        me = seed.users[owner].email
        to, cc = seed.rows("SELECT to_addrs, cc_addrs FROM messages WHERE id = ?", (id_,))[0]
        others = [a for a in (to + ", " + cc).split(", ") if a not in (me, email)]
        text = _TEXTS[(id_ + 3) % len(_TEXTS)]
        check = _sent_check(
            owner,
            "to_addrs, cc_addrs, subject, instr(body, ?) > 0",
            (email, ", ".join(others), f"Re: {subject}", 1),
            (text,),
        )
        return (
            owner,
            f"Reply to everyone on the email “{subject}” saying “{text}”.",
            check,
            (
                *open_message(subject),
                click("link", "Reply all"),
                fill("textbox", "Body", text),
                click("button", "Send"),
                answer(),
            ),
        )

    return _instances("reply_all", rows, make)


def forward_to_contact(seed: Seed):
    rows = []
    for owner, id_, subject, _sender, email, _ in seed.received("AND subject NOT LIKE 'Re:%'"):
        contacts = seed.rows(
            "SELECT name, email FROM contacts WHERE owner = ? AND email != ? ORDER BY name", (owner, email)
        )
        rows.append((owner, subject, contacts[id_ % len(contacts)]))

    def make(row):
        owner, subject, (name, address) = row
        return (
            owner,
            f"Forward the email “{subject}” to my contact {name}.",
            _sent_check(owner, "to_addrs, cc_addrs, subject", (address, "", f"Fwd: {subject}")),
            (
                *open_message(subject),
                click("link", "Forward"),
                fill("textbox", "To", name),
                click("button", "Send"),
                answer(),
            ),
        )

    return _instances("forward_to_contact", rows, make)


def compose_to_contact(seed: Seed):
    rows = []
    for owner, *_ in USERS:
        contacts = seed.rows("SELECT name, email FROM contacts WHERE owner = ? ORDER BY name", (owner,))
        for index in range(len(contacts)):
            rows.append((owner, contacts[index], contacts[(index + 3) % len(contacts)], index))

    def make(row):
        owner, (to_name, to), (cc_name, cc), index = row
        subject = (
            "Lunch next week",
            "Quick question",
            "Meeting notes",
            "Contract renewal",
            "Welcome aboard",
            "Travel plans",
            "Feedback request",
        )[index % 7]
        text = _TEXTS[(index * 5) % len(_TEXTS)]
        goal = f"Write to {to_name} (and copy {cc_name}) with the subject “{subject}” and the message “{text}”."
        return (
            owner,
            goal,
            _sent_check(owner, "to_addrs, cc_addrs, subject, instr(body, ?) > 0", (to, cc, subject, 1), (text,)),
            (
                click("link", "Compose"),
                fill("textbox", "To", to),
                fill("textbox", "Cc", cc),
                fill("textbox", "Subject", subject),
                fill("textbox", "Body", text),
                click("button", "Send"),
                answer(),
            ),
        )

    return _instances("compose_to_contact", rows, make)


def archive_all_from(seed: Seed):
    rows = seed.rows(
        "SELECT owner, sender_name, sender_email, COUNT(*) FROM messages WHERE folder = 'inbox' "
        "GROUP BY owner, sender_email HAVING COUNT(*) BETWEEN 2 AND 5"
    )

    def make(row):
        owner, sender, email, _ = row
        moved = seed.rows(
            "SELECT id, subject FROM messages WHERE owner = ? AND folder = 'inbox' AND sender_email = ?", (owner, email)
        )
        archive = sorted(
            [id_ for id_, _ in moved]
            + [id_ for (id_,) in seed.rows("SELECT id FROM messages WHERE owner = ? AND folder = 'archive'", (owner,))]
        )
        check = AllOf(
            (
                DbCheck(
                    "SELECT id FROM messages WHERE owner = ? AND folder = 'archive' ORDER BY id",
                    tuple((id_,) for id_ in archive),
                    (owner,),
                    "the archive holds exactly the moved mail",
                ),
                DbCheck(
                    "SELECT COUNT(*) FROM messages WHERE owner = ? AND folder = 'inbox' AND sender_email = ?",
                    ((0,),),
                    (owner, email),
                    f"no mail from {email} left in the inbox",
                ),
            )
        )
        return (
            owner,
            f"Move all the messages from {sender} in my inbox to the archive.",
            check,
            (
                *advanced_search(sender, "inbox"),
                *(tick(f"Select message: {subject}") for _, subject in moved),
                choose("Move selected to", "Archive"),
                click("button", "Move"),
                answer(),
            ),
        )

    return _instances("archive_all_from", rows, make)


def _starred_after(seed: Seed, owner: str, id_: int) -> DbCheck:
    starred = sorted(
        {id_} | {i for (i,) in seed.rows("SELECT id FROM messages WHERE owner = ? AND is_starred = 1", (owner,))}
    )
    return DbCheck(
        "SELECT id FROM messages WHERE owner = ? AND is_starred = 1 ORDER BY id",
        tuple((i,) for i in starred),
        (owner,),
        f"message {id_} starred, no other star changed",
    )


def star_subject(seed: Seed):
    def make(row):
        owner, id_, subject, *_ = row
        return (
            owner,
            f"Star the email with the subject “{subject}”.",
            _starred_after(seed, owner, id_),
            (*open_message(subject), click("button", "Star"), answer()),
        )

    return _instances("star_subject", seed.received("AND is_starred = 0 AND subject NOT LIKE 'Re:%'"), make)


def star_latest_answer(seed: Seed):
    rows = seed.rows(
        "SELECT owner, id, sender_name, subject FROM messages m WHERE folder IN ('inbox', 'archive') "
        "AND is_starred = 0 AND sent_at = (SELECT MAX(sent_at) FROM messages n WHERE n.owner = m.owner "
        "AND n.folder IN ('inbox', 'archive') AND n.sender_email = m.sender_email)"
    )

    def make(row):
        owner, id_, sender, subject = row
        return (
            owner,
            f"Star the most recent email from {sender} and tell me its subject.",
            AllOf((_starred_after(seed, owner, id_), AnswerExact(subject))),
            (*search(sender), click("link", subject), click("button", "Star"), answer(subject)),
        )

    return _instances("star_latest_answer", rows, make)


def mark_unread(seed: Seed):
    def make(row):
        owner, id_, subject, *_ = row
        # Opening mail marks it read, so browsing may shrink the unread set; nothing else may join it.
        was_unread = [i for (i,) in seed.rows("SELECT id FROM messages WHERE owner = ? AND is_read = 0", (owner,))]
        marks = ", ".join("?" * (len(was_unread) + 1))
        check = AllOf(
            (
                DbCheck("SELECT is_read FROM messages WHERE id = ?", ((0,),), (id_,), f"message {id_} is unread"),
                DbCheck(
                    f"SELECT COUNT(*) FROM messages WHERE owner = ? AND is_read = 0 AND id NOT IN ({marks})",
                    ((0,),),
                    (owner, id_, *was_unread),
                    "no other message was marked unread",
                ),
            )
        )
        return (
            owner,
            f"Mark the email “{subject}” as unread.",
            check,
            (*open_message(subject), click("button", "Mark as unread"), answer()),
        )

    return _instances("mark_unread", seed.received("AND is_read = 1 AND subject NOT LIKE 'Re:%'"), make)


def mark_read_from(seed: Seed):
    rows = seed.rows(
        "SELECT owner, sender_name, sender_email FROM messages WHERE folder = 'inbox' AND is_read = 0 "
        "GROUP BY owner, sender_email HAVING COUNT(*) BETWEEN 2 AND 5"
    )

    def make(row):
        owner, sender, email = row
        unread = seed.rows(
            "SELECT id, subject FROM messages WHERE owner = ? AND folder = 'inbox' AND is_read = 0 AND "
            "sender_email = ?",
            (owner, email),
        )
        rest = seed.rows(
            "SELECT id FROM messages WHERE owner = ? AND is_read = 0 AND NOT (folder = 'inbox' AND "
            "sender_email = ?) ORDER BY id",
            (owner, email),
        )
        check = DbCheck(
            "SELECT id FROM messages WHERE owner = ? AND is_read = 0 ORDER BY id",
            tuple(rest),
            (owner,),
            f"every inbox message from {email} read, nothing else",
        )
        return (
            owner,
            f"Mark all unread messages from {sender} in my inbox as read, without opening them.",
            check,
            (
                *advanced_search(sender, "inbox", unread=True),
                *(tick(f"Select message: {s}") for _, s in unread),
                click("button", "Mark read"),
                answer(),
            ),
        )

    return _instances("mark_read_from", rows, make)


def _folder_holds(seed: Seed, owner: str, folder: str, id_: int) -> DbCheck:
    """``folder`` holds what it held plus message ``id_``: moving everything there is not moving that message."""
    ids = sorted(
        {id_} | {i for (i,) in seed.rows("SELECT id FROM messages WHERE owner = ? AND folder = ?", (owner, folder))}
    )
    return DbCheck(
        "SELECT id FROM messages WHERE owner = ? AND folder = ? ORDER BY id",
        tuple((i,) for i in ids),
        (owner, folder),
        f"the {folder} holds message {id_} besides what it held",
    )


def delete_subject(seed: Seed):
    def make(row):
        owner, id_, subject, *_ = row
        return (
            owner,
            f"Delete the email “{subject}”.",
            _folder_holds(seed, owner, "trash", id_),
            (*open_message(subject), click("button", "Delete"), answer()),
        )

    return _instances("delete_subject", seed.received("AND subject NOT LIKE 'Re:%'"), make)


def restore_from_trash(seed: Seed):
    rows = seed.rows("SELECT owner, id, subject, sender_name FROM messages WHERE folder = 'trash'")

    def make(row):
        owner, id_, subject, sender = row
        return (
            owner,
            f"I deleted the email “{subject}” from {sender} by mistake. Put it back in my inbox.",
            _folder_holds(seed, owner, "inbox", id_),
            (
                click("link", "Trash"),
                click("link", subject),
                choose("Move to", "Inbox"),
                click("button", "Move"),
                answer(),
            ),
        )

    return _instances("restore_from_trash", rows, make)


def create_label_apply(seed: Seed):
    rows = [
        row + (_NEW_LABELS[index % len(_NEW_LABELS)],)
        for index, row in enumerate(seed.received("AND subject NOT LIKE 'Re:%'"))
    ]

    def make(row):
        owner, id_, subject, *_, label = row
        check = DbCheck(
            "SELECT ml.message_id FROM labels l JOIN message_labels ml ON ml.label_id = l.id "
            "WHERE l.owner = ? AND l.name = ?",
            ((id_,),),
            (owner, label),
            f"label {label!r} exists and is on message {id_} only",
        )
        return (
            owner,
            f"Create a label called “{label}” and put it on the email “{subject}”.",
            check,
            (
                click("link", "Manage labels"),
                fill("textbox", "Label name", label),
                click("button", "Create label"),
                *open_message(subject),
                choose("Add label", label),
                click("button", "Apply label"),
                answer(),
            ),
        )

    return _instances("create_label_apply", rows, make)


def label_all_from(seed: Seed):
    rows = seed.rows(
        "SELECT m.owner, m.sender_name, m.sender_email, l.name, l.id FROM messages m JOIN labels l ON "
        "l.owner = m.owner WHERE m.folder = 'inbox' GROUP BY m.owner, m.sender_email, l.id "
        "HAVING COUNT(*) BETWEEN 2 AND 4"
    )

    def make(row):
        owner, sender, email, label, label_id = row
        targets = seed.rows(
            "SELECT id, subject FROM messages WHERE owner = ? AND folder = 'inbox' AND sender_email = ?", (owner, email)
        )
        labelled = sorted(
            {i for i, _ in targets}
            | {i for (i,) in seed.rows("SELECT message_id FROM message_labels WHERE label_id = ?", (label_id,))}
        )
        check = DbCheck(
            "SELECT message_id FROM message_labels WHERE label_id = ? ORDER BY message_id",
            tuple((i,) for i in labelled),
            (label_id,),
            f"label {label!r} on all inbox mail from {email}",
        )
        return (
            owner,
            f"Put my label “{label}” on every message from {sender} in my inbox.",
            check,
            (
                *advanced_search(sender, "inbox"),
                *(tick(f"Select message: {s}") for _, s in targets),
                choose("Label selected as", label),
                click("button", "Apply label"),
                answer(),
            ),
        )

    return _instances("label_all_from", rows, make)


def add_contact(seed: Seed):
    rows = [
        (USERS[index % len(USERS)][0], name, email, f"+1 555 {200 + index * 7} {4000 + index * 131}")
        for index, (name, email) in enumerate(_NEW_PEOPLE)
    ]

    def make(row):
        owner, name, email, phone = row
        return (
            owner,
            f"Add {name} to my contacts: email {email}, phone {phone}.",
            DbCheck(
                "SELECT name, email, phone FROM contacts WHERE owner = ? AND email = ?",
                ((name, email, phone),),
                (owner, email),
            ),
            (
                click("link", "Contacts"),
                click("link", "Add contact"),
                fill("textbox", "Name", name),
                fill("textbox", "Email", email),
                fill("textbox", "Phone", phone),
                click("button", "Save contact"),
                answer(),
            ),
        )

    return _instances("add_contact", rows, make)


def edit_contact_phone(seed: Seed):
    rows = seed.rows("SELECT owner, id, name FROM contacts")

    def make(row):
        owner, id_, name = row
        phone = f"+44 20 {7000 + id_ * 13} {1000 + id_ * 37}"
        return (
            owner,
            f"{name} has a new phone number, {phone}. Update my contacts.",
            DbCheck("SELECT id, phone FROM contacts WHERE owner = ? AND phone = ?", ((id_, phone),), (owner, phone)),
            (
                click("link", "Contacts"),
                click("link", f"Edit {name}"),
                fill("textbox", "Phone", phone),
                click("button", "Save contact"),
                answer(),
            ),
        )

    return _instances("edit_contact_phone", rows, make)


def change_signature(seed: Seed):
    rows = [(USERS[index % len(USERS)][0], pattern) for index, pattern in enumerate(_SIGNATURES)]

    def make(row):
        owner, pattern = row
        person = seed.users[owner]
        signature = pattern.format(first=person.first, name=person.name)
        shown = signature.replace("\n", " / ")
        return (
            owner,
            f"Change my email signature to “{shown}” (each “ / ” is a line break).",
            DbCheck("SELECT signature FROM users WHERE username = ?", ((signature,),), (owner,)),
            (
                click("link", "Settings"),
                fill("textbox", "Signature", signature),
                click("button", "Save settings"),
                answer(),
            ),
        )

    return _instances("change_signature", rows, make)


def display_name_and_page_size(seed: Seed):
    rows = [(USERS[index % len(USERS)][0], index) for index in range(12)]

    def make(row):
        owner, index = row
        person = seed.users[owner]
        name = (
            f"{person.first} {person.name.split()[1][0]}.",
            f"{person.name} (Larkspur)",
            f"{person.first} from Larkspur",
        )[index % 3]
        size = ("10", "50")[index // 3 % 2]
        return (
            owner,
            f"In my settings, change my display name to “{name}” and show {size} messages per page.",
            DbCheck("SELECT display_name, page_size FROM users WHERE username = ?", ((name, int(size)),), (owner,)),
            (
                click("link", "Settings"),
                fill("textbox", "Display name", name),
                choose("Messages per page", size),
                click("button", "Save settings"),
                answer(),
            ),
        )

    return _instances("display_name_and_page_size", rows, make)


TEMPLATES = (
    sender_of_subject,
    sender_of_reference,
    unread_from_count,
    latest_subject_from,
    oldest_in_folder,
    thread_last_writer,
    contact_phone,
    invoice_amount,
    offsite_venue,
    count_label,
    nav_search_sender,
    nav_search_text,
    nav_filter,
    nav_open_message,
    nav_contact_edit,
    nav_label,
    reply_latest_from,
    reply_all,
    forward_to_contact,
    compose_to_contact,
    archive_all_from,
    star_subject,
    star_latest_answer,
    mark_unread,
    mark_read_from,
    delete_subject,
    restore_from_trash,
    create_label_apply,
    label_all_from,
    add_contact,
    edit_contact_phone,
    change_signature,
    display_name_and_page_size,
)


def tasks() -> list[WebTask]:
    """Every template's instances, in template order (deterministic)."""
    db = MailApp.pristine().restore()
    try:
        seed = Seed(db)
        return [task for template in TEMPLATES for task in template(seed)]
    finally:
        db.close()
