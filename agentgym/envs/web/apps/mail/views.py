"""HTML pieces of the webmail: the sidebar, message tables with bulk actions, pagination, forms and notices (all server-rendered, no script)."""

from __future__ import annotations

from urllib.parse import quote, urlencode

from agentgym.envs.web.site import esc

__all__ = [
    "STYLE",
    "FOLDER_TITLES",
    "sidebar",
    "message_table",
    "pager",
    "notice",
    "errors",
    "field",
    "textarea",
    "select",
    "quoted",
    "body_html",
]

STYLE = """
.layout { display: flex; gap: 16px; }
.side { min-width: 150px; } .side ul { list-style: none; padding: 0; margin: 0 0 12px 0; } .side li { margin: 3px 0; }
.side .current { font-weight: bold; }
.count { color: #666; font-size: 90%; }
.content { flex: 1; }
tr.unread td { font-weight: bold; }
.bulk { margin: 6px 0; display: flex; gap: 6px; flex-wrap: wrap; align-items: center; }
.body { border: 1px solid #ddd; padding: 0 8px; background: #fafafa; }
.thread article { border-left: 3px solid #9ab; padding: 2px 8px; margin: 8px 0; }
.thread article.current { border-left-color: #234; }
form.stack label { display: block; margin: 6px 0; }
form.stack input[type=text], form.stack input[type=email], form.stack textarea { width: 480px; }
.chip { background: #e4ecf4; padding: 1px 6px; margin-right: 4px; }
.quick { margin-bottom: 10px; }
"""

#: Folder name in URLs and the database → its title on the page.
FOLDER_TITLES = {"inbox": "Inbox", "sent": "Sent", "archive": "Archive", "trash": "Trash"}


def sidebar(current: str, unread: dict[str, int], labels: list[tuple[str, int]]) -> str:
    """Folder and label links; ``current`` is the path of the page being shown."""

    def item(path: str, title: str, count: int) -> str:
        css = " class=current" if path == current else ""
        extra = f" <span class=count>{count} unread</span>" if count else ""
        return f'<li{css}><a href="{esc(path)}">{esc(title)}</a>{extra}</li>'

    folders = "".join(item(f"/folder/{name}", title, unread.get(name, 0)) for name, title in FOLDER_TITLES.items())
    label_items = "".join(item(f"/label/{quote(name)}", name, count) for name, count in labels)
    return (
        f'<nav class=side aria-label=Mailboxes><a href="/compose"><strong>Compose</strong></a>'
        f"<h3>Folders</h3><ul>{folders}</ul><h3>Labels</h3><ul>{label_items}</ul>"
        f'<a href="/labels">Manage labels</a></nav>'
    )


def message_table(
    rows: list[tuple], back: str, labels: list[str], *, show_folder: bool = False, sent_view: bool = False
) -> str:
    """A message list inside the bulk-action form.

    ``rows``: (id, folder, sender_name, to_addrs, subject, sent_at, is_read, is_starred). Each row
    has a checkbox named after the subject so agents (and reference solutions) can pick rows.
    """
    if not rows:
        return "<p>No messages.</p>"
    head = (
        "<tr><th>Select</th><th>Star</th><th>"
        + ("To" if sent_view else "From")
        + "</th><th>Subject</th>"
        + ("<th>Folder</th>" if show_folder else "")
        + "<th>Status</th><th>Date</th></tr>"
    )
    body = []
    for id_, folder, sender, to, subject, sent_at, is_read, starred in rows:
        who = to if sent_view else sender
        body.append(
            f'<tr class="{"read" if is_read else "unread"}">'
            f'<td><input type=checkbox name=ids value={id_} aria-label="Select message: {esc(subject)}"></td>'
            f"<td>{'★' if starred else ''}</td><td>{esc(who)}</td>"
            f'<td><a href="/message/{id_}">{esc(subject)}</a></td>'
            + (f"<td>{FOLDER_TITLES[folder]}</td>" if show_folder else "")
            + f"<td>{'' if is_read else 'Unread'}</td><td>{esc(sent_at)}</td></tr>"
        )
    moves = "".join(f"<option value={name}>{title}</option>" for name, title in FOLDER_TITLES.items() if name != "sent")
    label_controls = ""
    if labels:
        options = "".join(f"<option>{esc(name)}</option>" for name in labels)
        label_controls = (
            f'<select name=label aria-label="Label selected as">{options}</select>'
            f"<button name=action value=label>Apply label</button>"
        )
    bar = (
        f'<div class=bulk><select name=destination aria-label="Move selected to">{moves}</select>'
        f"<button name=action value=move>Move</button>"
        f"<button name=action value=read>Mark read</button><button name=action value=unread>Mark unread</button>"
        f"<button name=action value=star>Star</button><button name=action value=unstar>Unstar</button>"
        f"<button name=action value=delete>Delete</button>{label_controls}</div>"
    )
    return (
        f'<form method=post action=/bulk><input type=hidden name=back value="{esc(back)}">{bar}'
        f"<table aria-label=Messages>{head}{''.join(body)}</table></form>"
    )


def pager(path: str, params: dict, page: int, pages: int) -> str:
    """Previous/next links that keep the other query parameters."""

    def link(number: int, text: str) -> str:
        query = {key: value for key, value in params.items() if value} | {"page": str(number)}
        return f'<a href="{esc(path)}?{esc(urlencode(query))}">{text}</a>'

    parts = []
    if page > 1:
        parts.append(link(page - 1, "Previous page"))
    parts.append(f"<span>Page {page} of {pages}</span>")
    if page < pages:
        parts.append(link(page + 1, "Next page"))
    return f"<p class=pager>{' '.join(parts)}</p>"


def notice(text: str) -> str:
    return f"<div class=flash role=status>{esc(text)}</div>" if text else ""


def errors(messages: list[str]) -> str:
    if not messages:
        return ""
    return "<div class=error role=alert>" + "".join(f"<p>{esc(m)}</p>" for m in messages) + "</div>"


def field(label: str, name: str, value: str = "", kind: str = "text") -> str:
    return f'<label>{esc(label)} <input type={kind} name={name} value="{esc(value)}"></label>'


def textarea(label: str, name: str, value: str = "", rows: int = 8) -> str:
    return f"<label>{esc(label)} <textarea name={name} rows={rows} cols=70>{esc(value)}</textarea></label>"


def select(label: str, name: str, options: list[tuple[str, str]], chosen: str = "") -> str:
    """A labelled select; ``options`` are (value, text)."""
    items = "".join(
        f'<option value="{esc(value)}"{" selected" if value == chosen else ""}>{esc(text)}</option>'
        for value, text in options
    )
    # A label wrapping the select would be named after every option's text too.
    return (
        f"<div><label for=field-{name}>{esc(label)}</label> <select id=field-{name} name={name}>{items}</select></div>"
    )


def quoted(text: str) -> str:
    return "\n".join("> " + line if line else ">" for line in text.splitlines())


def body_html(text: str) -> str:
    """A message body, one paragraph element per paragraph (the observation shows each one in full)."""
    paragraphs = [p for p in text.split("\n\n") if p.strip()]
    return (
        "<div class=body>"
        + "".join("<p>" + "<br>".join(esc(line) for line in p.splitlines()) + "</p>" for p in paragraphs)
        + "</div>"
    )
