"""The HTML report of an eval run: one self-contained ``report.html`` with tables, SVG plots and a trajectory viewer.

:func:`write_report` reads ``results.jsonl`` and ``summary.json`` from a run directory;
:func:`compare_report` writes a paired comparison of two runs. The page
loads nothing from the network (a Content-Security-Policy forbids it): styles and the small
viewer script are inline, plots are SVG drawn here, screenshots are ``data:`` URIs. Everything
that came from a model or an environment is HTML-escaped, with control characters (NUL
included) shown as ``\\xNN`` escapes rather than written raw, and the CSP admits only the
report's own script (by hash), so untrusted text can neither run nor fetch.

The category plot has one horizontal bar per category, so any number of categories stays
readable; the trajectory viewer lists episodes by task and sample and opens the first failure.
Where the policy was sent screenshots (``agentgym eval --images``), each turn shows the ones its
prompt held, as the small JPEGs the trajectory recorded (``metadata["image_thumbnails"]``, by the
hashes in ``Turn.image_hashes``), before the action the model took on seeing them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from html import escape as _escape_markup
from pathlib import Path

from agentgym.eval.metrics import compare, mean_pass_at_k, per_task
from agentgym.rollout.trajectory import Trajectory

__all__ = [
    "compare_report",
    "load_run",
    "render_branching_report",
    "render_comparison",
    "render_report",
    "write_branching_report",
    "write_report",
]

_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
# C0 and C1 controls but tab, newline and carriage return: not text a reader can see, and NUL is
# not allowed in HTML at all.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def escape(text: str, quote: bool = True) -> str:
    """``text`` HTML-escaped, with control characters shown as ``\\xNN``."""
    return _escape_markup(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text), quote)


_MAX_HISTOGRAM_BINS = 20

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
table { border-collapse: collapse; margin: .5rem 0; }
th, td { border: 1px solid #ccc; padding: .25rem .6rem; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.plots { display: flex; flex-wrap: wrap; gap: 1rem; }
svg { background: #fafafa; border: 1px solid #ddd; }
svg text { font-size: 11px; fill: #333; }
.bar { fill: #4c78a8; } .whisker { stroke: #222; stroke-width: 1.5; }
.grid { stroke: #ddd; } .curve { fill: none; stroke: #4c78a8; stroke-width: 2; } .point { fill: #e45756; }
#viewer { display: flex; gap: 1rem; align-items: flex-start; }
#episode-list { list-style: none; padding: 0; margin: 0; min-width: 16rem; max-height: 80vh; overflow: auto; }
.episode-link { width: 100%; text-align: left; border: 1px solid #ccc; background: #fff; margin: 1px 0; cursor: pointer; }
.episode-link.selected { background: #dde8f5; }
.episode-link[data-success="true"]::before { content: "\\2714  "; color: #2a7; }
.episode-link[data-success="false"]::before { content: "\\2718  "; color: #c33; }
.bar-label { font-size: 11px; }
#episode-detail { flex: 1; min-width: 0; }
pre { white-space: pre-wrap; word-break: break-word; background: #f4f4f4; padding: .4rem; max-height: 24rem; overflow: auto; }
pre.error { background: #fde8e8; }
.turn { border-top: 1px solid #ddd; padding: .4rem 0; }
.turn img { max-width: 100%; border: 1px solid #ccc; }
.model-view { display: flex; flex-wrap: wrap; gap: .4rem; }
.model-view img { max-width: 256px; }
"""

_SCRIPT = """
const links = Array.from(document.querySelectorAll('.episode-link'));
function show(id) {
  document.querySelectorAll('.episode').forEach(a => { a.hidden = a.id !== 'episode-' + id; });
  links.forEach(l => l.classList.toggle('selected', l.dataset.episode === id));
}
links.forEach(l => l.addEventListener('click', () => show(l.dataset.episode)));
const first = links.find(l => l.dataset.success === 'false') || links[0];
if (first) show(first.dataset.episode);
document.querySelectorAll('input[name="outcome"]').forEach(radio => radio.addEventListener('change', () => {
  links.forEach(l => {
    l.parentElement.hidden = !(radio.value === 'all' || (radio.value === 'success') === (l.dataset.success === 'true'));
  });
}));
"""


def write_report(run_dir: str | Path) -> Path:
    """Write ``report.html`` into ``run_dir`` from its ``results.jsonl`` and ``summary.json``; return its path."""
    run_dir = Path(run_dir)
    summary, results = load_run(run_dir)
    path = run_dir / "report.html"
    path.write_text(render_report(summary, results), encoding="utf-8")
    return path


def compare_report(run_a: str | Path, run_b: str | Path, out: str | Path | None = None) -> Path:
    """Write an HTML comparison of run A against run B (paired over shared tasks); return its path.

    ``out`` defaults to ``compare-<name of run B>.html`` inside run A.
    """
    run_a, run_b = Path(run_a), Path(run_b)
    path = Path(out) if out is not None else run_a / f"compare-{run_b.name}.html"
    path.write_text(render_comparison(*load_run(run_a), *load_run(run_b)), encoding="utf-8")
    return path


def load_run(run_dir: str | Path) -> tuple[dict, list[dict]]:
    """A run's summary and the result rows it covers: the samples below its ``k``.

    A run directory may hold more samples than its last run asked for (``-k 4``, then ``-k 1``);
    the report and ``eval compare`` describe the same episodes as the summary.
    """
    from agentgym.eval.harness import load_results

    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    k = int(summary.get("k", 1))
    return summary, [row for row in load_results(run_dir) if row["sample"] < k]


def _page(title: str, body: list[str], script: str = "") -> str:
    # The CSP admits no network at all and only this page's own script, by hash.
    script_hash = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    csp = f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{script_hash}'"
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{escape(csp)}">',
            f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>",
            f"<h1>{escape(title)}</h1>",
            *body,
            f"<script>{script}</script>" if script else "",
            "</body></html>",
        ]
    )


def render_report(summary: dict, results: list[dict]) -> str:
    """The report page for a run's summary and result rows."""
    k = int(summary.get("k", 1))
    model = str(summary.get("model", ""))
    title = f"agentgym eval: {summary.get('suite', '')} / {_short_model(model)}"
    errors = summary.get("errors") or {}
    return _page(
        title,
        [
            f'<p id="run-info">model {escape(model)} &middot; k = {k} &middot; {_fmt(summary.get("tasks"))} tasks &middot; '
            f"{_fmt(summary.get('episodes'))} episodes"
            + "".join(f" &middot; {escape(str(kind))}: {_fmt(n)}" for kind, n in errors.items())
            + "</p>",
            "<h2>Summary</h2>",
            _summary_table(summary.get("metrics", {})),
            "<h2>By category</h2>",
            _category_table(summary, results, k),
            "<h2>Plots</h2>",
            '<div class="plots">',
            _category_plot(summary.get("by_category", {})),
            _pass_at_k_plot(results, k),
            _turns_plot(results),
            "</div>",
            "<h2>Trajectories</h2>",
            _viewer(results),
        ],
        _SCRIPT,
    )


def render_comparison(summary_a: dict, results_a: list[dict], summary_b: dict, results_b: list[dict]) -> str:
    """The comparison page: both runs' metrics, the paired difference overall and per category, and the tasks that differ."""
    name_a, name_b = (f"{s.get('model', '')} ({s.get('suite', '')})" for s in (summary_a, summary_b))
    metrics_a, metrics_b = summary_a.get("metrics", {}), summary_b.get("metrics", {})
    keys = ["success_rate", "mean_turns", "tokens_in", "tokens_out", "wall_s", "env_error_rate", "program_error_rate"]
    side_by_side = "".join(
        f'<tr data-metric="{key}"><td>{key}</td><td>{_fmt(metrics_a.get(key))}</td>'
        f"<td>{_fmt(metrics_b.get(key))}</td></tr>"
        for key in keys
    )
    categories = sorted({str(r.get("category")) for r in results_a} & {str(r.get("category")) for r in results_b})
    paired = [("(all)", compare(results_a, results_b))] + [
        (
            c,
            compare(
                [r for r in results_a if str(r.get("category")) == c],
                [r for r in results_b if str(r.get("category")) == c],
            ),
        )
        for c in categories
    ]
    paired_rows = "".join(
        f'<tr data-category="{escape(name)}"><td>{escape(name)}</td><td>{_fmt(c["tasks"])}</td>'
        f"<td>{_fmt(c['success_rate_a'])}</td><td>{_fmt(c['success_rate_b'])}</td><td>{_fmt(c['difference'])}</td>"
        f"<td>{_ci(c['difference_ci95'])}</td><td>{_fmt(c['p_value'])}</td></tr>"
        for name, c in paired
    )
    overall = paired[0][1]
    rates_a = {t: sum(bool(r["success"]) for r in rows) / len(rows) for t, rows in per_task(results_a).items()}
    rates_b = {t: sum(bool(r["success"]) for r in rows) / len(rows) for t, rows in per_task(results_b).items()}
    differing = "".join(
        f"<tr><td>{escape(str(t))}</td><td>{_fmt(rates_a[t])}</td><td>{_fmt(rates_b[t])}</td></tr>"
        for t in sorted(rates_a.keys() & rates_b.keys())
        if rates_a[t] != rates_b[t]
    )
    return _page(
        f"agentgym eval: A = {name_a} vs B = {name_b}",
        [
            f'<p id="pairing">{overall["tasks"]} shared tasks; {overall["only_a"]} only in A, '
            f"{overall['only_b']} only in B (left out). Difference = A \u2212 B; p from a paired sign-flip test.</p>",
            '<h2>Metrics</h2><table id="metrics-table"><thead><tr><th>Metric</th><th>A</th><th>B</th></tr></thead>'
            f"<tbody>{side_by_side}</tbody></table>",
            '<h2>Paired success rate</h2><table id="paired-table"><thead><tr><th>Category</th><th>Tasks</th><th>A</th>'
            "<th>B</th><th>A \u2212 B</th><th>95% CI</th><th>p</th></tr></thead>"
            f"<tbody>{paired_rows}</tbody></table>",
            '<h2>Tasks whose success rate differs</h2><table id="differing-table"><thead><tr><th>Task</th><th>A</th>'
            f"<th>B</th></tr></thead><tbody>{differing}</tbody></table>",
        ],
    )


def _short_model(model: str) -> str:
    """A model directory's last component (``/data/ckpt/qwen-7b`` → ``qwen-7b``); names without a path stay whole."""
    return Path(model.rstrip("/")).name or model if "/" in model else model


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "\u2014"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return escape(str(value))


def _ci(interval) -> str:
    lo, hi = interval if interval else (None, None)
    return f"[{_fmt(lo)}, {_fmt(hi)}]"


# --- tables ---------------------------------------------------------------------------------


def _summary_table(metrics: dict) -> str:
    rows = [
        ("success_rate", "Success rate", _fmt(metrics.get("success_rate"))),
        ("success_ci95", "Success rate, 95% CI (bootstrap over tasks)", _ci(metrics.get("success_ci95"))),
    ]
    for name, label in (("at", "@"), ("hat", "^")):  # pass@k, and τ-bench's reliability pass^k beside it
        intervals = metrics.get(f"pass_{name}_k_ci95", {})
        for j, v in metrics.get(f"pass_{name}_k", {}).items():
            rows.append((f"pass_{name}_{j}", f"pass{label}{escape(j)}", _fmt(v)))
            rows.append(
                (
                    f"pass_{name}_{j}_ci95",
                    f"pass{label}{escape(j)}, 95% CI (bootstrap over tasks)",
                    _ci(intervals.get(j)),
                )
            )
    rows += [
        ("mean_turns", "Mean turns per episode", _fmt(metrics.get("mean_turns"))),
        ("tokens_in", "Tokens in (total)", _fmt(metrics.get("tokens_in"))),
        ("tokens_out", "Tokens out (total)", _fmt(metrics.get("tokens_out"))),
        ("wall_s", "Wall time, s (total)", _fmt(metrics.get("wall_s"), 1)),
        ("env_error_rate", "Env error / timeout rate", _fmt(metrics.get("env_error_rate"))),
        ("program_error_rate", "Agent program failure rate", _fmt(metrics.get("program_error_rate"))),
    ]
    body = "".join(
        f'<tr data-metric="{escape(key)}"><td>{label}</td><td>{value}</td></tr>' for key, label, value in rows
    )
    return (
        f'<table id="summary-table"><thead><tr><th>Metric</th><th>Value</th></tr></thead><tbody>{body}</tbody></table>'
    )


def _category_table(summary: dict, results: list[dict], k: int) -> str:
    episodes = Counter(str(r.get("category")) for r in results)
    tasks: dict[str, set] = defaultdict(set)
    for r in results:
        tasks[str(r.get("category"))].add(r["task_id"])
    passes = ["1"] if k == 1 else ["1", str(k)]  # with k = 1, pass@k is pass@1
    head = [
        "Category",
        "Tasks",
        "Episodes",
        "Success rate",
        "95% CI",
        *(f"pass@{j}" for j in passes),
        *(f"pass^{j}" for j in passes[1:]),
        "Mean turns",
        "Env error rate",
        "Program failure rate",
    ]
    body = []
    for category, m in summary.get("by_category", {}).items():
        pass_k = m.get("pass_at_k", {})
        pass_hat = m.get("pass_hat_k", {})
        cells = [
            escape(category),
            _fmt(len(tasks[category])),
            _fmt(episodes[category]),
            _fmt(m.get("success_rate")),
            _ci(m.get("success_ci95")),
            *(_fmt(pass_k.get(j)) for j in passes),
            *(_fmt(pass_hat.get(j)) for j in passes[1:]),
            _fmt(m.get("mean_turns")),
            _fmt(m.get("env_error_rate")),
            _fmt(m.get("program_error_rate")),
        ]
        body.append(f'<tr data-category="{escape(category)}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return (
        '<table id="category-table"><thead><tr>'
        + "".join(f"<th>{escape(h)}</th>" for h in head)
        + "</tr></thead><tbody>"
        + "".join(body)
        + "</tbody></table>"
    )


# --- plots ----------------------------------------------------------------------------------
# All plots share one frame: width x height with margins, y from 0 to y_max.

_W, _H, _LEFT, _RIGHT, _TOP, _BOTTOM = 420, 260, 44, 12, 28, 48


def _frame(plot_id: str, title: str, y_max: float, y_ticks: Sequence[float], x_label: str, inner: list[str]) -> str:
    parts = [
        f'<svg id="{plot_id}" xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
        f'viewBox="0 0 {_W} {_H}" role="img" aria-label="{escape(title)}">',
        f'<text x="{_W / 2}" y="16" text-anchor="middle" font-weight="bold">{escape(title)}</text>',
    ]
    for tick in y_ticks:
        y = _y(tick, y_max)
        parts.append(
            f'<line class="grid" x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text x="{_LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{tick:g}</text>'
        )
    parts.append(f'<text x="{(_LEFT + _W - _RIGHT) / 2}" y="{_H - 6}" text-anchor="middle">{escape(x_label)}</text>')
    return "".join(parts + inner + ["</svg>"])


def _y(value: float, y_max: float) -> float:
    return _H - _BOTTOM - (value / y_max if y_max else 0.0) * (_H - _TOP - _BOTTOM)


def _bars(labels: list[str], values: list[float], y_max: float, titles: list[str]) -> list[str]:
    slot = (_W - _LEFT - _RIGHT) / max(len(values), 1)
    parts = []
    for i, (label, value, title) in enumerate(zip(labels, values, titles)):
        x, top = _LEFT + i * slot + slot * 0.15, _y(value, y_max)
        parts.append(
            f'<rect class="bar" x="{x:.1f}" y="{top:.1f}" width="{slot * 0.7:.1f}" '
            f'height="{_H - _BOTTOM - top:.1f}" data-value="{value:g}"><title>{escape(title)}</title></rect>'
            f'<text x="{x + slot * 0.35:.1f}" y="{_H - _BOTTOM + 14}" text-anchor="middle">'
            f"{escape(label[:14])}</text>"
        )
    return parts


_ROW, _LABEL_CHARS = 18, 28


def _category_plot(by_category: dict) -> str:
    """Success rate per category as horizontal bars with 95% CI whiskers: one row per category, however many."""
    label_width = 7 * min(_LABEL_CHARS, max((len(c) for c in by_category), default=4)) + 8
    left, right, top = label_width, _RIGHT + 8, 28
    height = top + _ROW * max(len(by_category), 1) + 36
    width = max(_W, left + 260)

    def x_of(value: float) -> float:
        return left + value * (width - left - right)

    title = "Success rate by category (95% CI)"
    parts = [
        f'<svg id="plot-category" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
        f'<text x="{width / 2}" y="16" text-anchor="middle" font-weight="bold">{escape(title)}</text>',
    ]
    for tick in (0, 0.25, 0.5, 0.75, 1):
        x = x_of(tick)
        parts.append(
            f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{height - 30}"/>'
            f'<text x="{x:.1f}" y="{height - 18}" text-anchor="middle">{tick:g}</text>'
        )
    for i, (category, m) in enumerate(by_category.items()):
        y, value = top + i * _ROW, m.get("success_rate") or 0.0
        # Cut in the middle: template names often share a prefix and differ at the end.
        half = (_LABEL_CHARS - 1) // 2
        label = category if len(category) <= _LABEL_CHARS else f"{category[:half]}\u2026{category[-half:]}"
        parts.append(
            f'<text class="bar-label" x="{left - 6}" y="{y + _ROW * 0.7:.1f}" text-anchor="end">'
            f"{escape(label)}<title>{escape(category)}</title></text>"
            f'<rect class="bar" x="{left}" y="{y + 3:.1f}" width="{x_of(value) - left:.1f}" height="{_ROW - 6}" '
            f'data-value="{value:g}"><title>{escape(category)}: {_fmt(m.get("success_rate"))} '
            f"{_ci(m.get('success_ci95'))}</title></rect>"
        )
        lo, hi = m.get("success_ci95") or (None, None)
        if lo is not None and hi is not None:
            mid = y + _ROW / 2
            parts.append(
                f'<g class="whisker"><line x1="{x_of(lo):.1f}" x2="{x_of(hi):.1f}" y1="{mid:.1f}" y2="{mid:.1f}"/>'
                f'<line x1="{x_of(lo):.1f}" x2="{x_of(lo):.1f}" y1="{mid - 4:.1f}" y2="{mid + 4:.1f}"/>'
                f'<line x1="{x_of(hi):.1f}" x2="{x_of(hi):.1f}" y1="{mid - 4:.1f}" y2="{mid + 4:.1f}"/></g>'
            )
    parts.append(f'<text x="{(left + width - right) / 2}" y="{height - 4}" text-anchor="middle">success rate</text>')
    return "".join(parts + ["</svg>"])


def _pass_at_k_plot(results: list[dict], k: int) -> str:
    # Computed from the rows rather than summary.json, which may hold only pass@1 and pass@k.
    counts = [(len(rows), sum(bool(r["success"]) for r in rows)) for rows in per_task(results).values()]
    points = [(j, mean_pass_at_k(counts, j)) for j in range(1, k + 1)]
    points = [(j, v) for j, v in points if v is not None]
    x_of = {j: _LEFT + (_W - _LEFT - _RIGHT) * ((j - 0.5) / k) for j in range(1, k + 1)}
    inner = [
        f'<text x="{x:.1f}" y="{_H - _BOTTOM + 14}" text-anchor="middle">{j}</text>'
        for j, x in x_of.items()
        if k <= 20 or j in (1, k) or j % max(1, k // 10) == 0
    ]
    if points:
        inner.append(
            '<polyline class="curve" points="' + " ".join(f"{x_of[j]:.1f},{_y(v, 1):.1f}" for j, v in points) + '"/>'
        )
    inner += [
        f'<circle class="point" cx="{x_of[j]:.1f}" cy="{_y(v, 1):.1f}" r="3.5" data-k="{j}" data-value="{v:.6f}">'
        f"<title>pass@{j} = {v:.3f}</title></circle>"
        for j, v in points
    ]
    return _frame("plot-pass-at-k", "pass@k", 1.0, [0, 0.25, 0.5, 0.75, 1], "k", inner)


def _turns_plot(results: list[dict]) -> str:
    turns = [int(r["turns"]) for r in results]
    lo, hi = (min(turns), max(turns)) if turns else (0, 0)
    # One bin per turn count while that stays readable, else equal-width integer bins.
    width = max(1, -(-(hi - lo + 1) // _MAX_HISTOGRAM_BINS))
    edges = list(range(lo, hi + 1, width))
    counts = [sum(e <= t < e + width for t in turns) for e in edges]
    labels = [str(e) if width == 1 else f"{e}-{e + width - 1}" for e in edges]
    y_max = max(counts, default=0) or 1
    ticks = sorted({0, y_max, *([y_max // 2] if y_max >= 2 else [])})
    inner = _bars(
        labels, [float(c) for c in counts], y_max, [f"{label} turns: {c} episodes" for label, c in zip(labels, counts)]
    )
    return _frame("plot-turns", "Turns per episode", y_max, ticks, "turns", inner)


# --- trajectory viewer ----------------------------------------------------------------------


def _viewer(results: list[dict]) -> str:
    n_ok = sum(bool(r["success"]) for r in results)
    filters = "".join(
        f'<label><input type="radio" name="outcome" value="{value}"{" checked" if value == "all" else ""}>'
        f" {label} ({count})</label> "
        for value, label, count in [
            ("all", "All", len(results)),
            ("success", "Solved", n_ok),
            ("fail", "Failed", len(results) - n_ok),
        ]
    )
    items, articles = [], []
    # By task, then sample (results.jsonl is in finishing order); ids stay the rows' positions.
    order = sorted(
        range(len(results)), key=lambda i: (_natural(str(results[i]["task_id"])), int(results[i].get("sample") or 0))
    )
    for i in order:
        row = results[i]
        success = "true" if row["success"] else "false"
        items.append(
            f'<li><button class="episode-link" data-episode="{i}" data-success="{success}">'
            f"{escape(str(row['task_id']))} #{escape(str(row.get('sample', 0)))}</button></li>"
        )
        articles.append(_episode(i, row))
    return (
        f'<div id="outcome-filter">{filters}</div><div id="viewer"><ul id="episode-list">{"".join(items)}</ul>'
        f'<div id="episode-detail">{"".join(articles)}</div></div>'
    )


def _natural(text: str) -> list:
    """A sort key that orders the numbers in ids by value (``HumanEval/2`` before ``HumanEval/10``)."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", text) if part]


def _episode(i: int, row: dict) -> str:
    facts = [
        ("task", row["task_id"]),
        ("category", row.get("category")),
        ("sample", row.get("sample")),
        ("success", row["success"]),
        ("reward", row.get("reward")),
        ("turns", row.get("turns")),
        ("tokens in/out", f"{row.get('tokens_in')}/{row.get('tokens_out')}"),
        ("wall s", row.get("wall_s")),
    ]
    parts = [
        f'<article class="episode" id="episode-{i}" hidden><h3>{escape(str(row["task_id"]))} '
        f'#{escape(str(row.get("sample", 0)))}</h3><p class="facts">'
        + " &middot; ".join(f"{escape(name)}: {_fmt(value)}" for name, value in facts)
        + "</p>"
    ]
    if row.get("error"):
        parts.append(f'<pre class="error episode-error">{escape(str(row["error"]))}</pre>')
    trajectory = Trajectory.from_dict(row["trajectory"]) if row.get("trajectory") else None
    if trajectory is None:
        parts.append("<p>No trajectory recorded.</p>")
    else:
        parts.append(
            f'<h4>Initial observation</h4><pre class="initial-observation">'
            f'{escape(trajectory.initial_observation)}</pre><ol class="turns">'
        )
        thumbnails = trajectory.metadata.get("image_thumbnails")
        thumbnails = thumbnails if isinstance(thumbnails, dict) else {}
        parts += [_turn(turn, thumbnails) for turn in trajectory.turns]
        parts.append("</ol>")
    parts.append("</article>")
    return "".join(parts)


def _model_view(turn, thumbnails: dict) -> str:
    """The screenshots the model was shown before this turn's action (empty for a text prompt)."""
    if not turn.image_hashes:
        return ""
    shown = []
    for digest in turn.image_hashes:
        data = thumbnails.get(digest)
        data = "".join(data.split()) if isinstance(data, str) else ""
        # Only well-formed base64 goes into the attribute, so the data cannot break out of it.
        if _BASE64.fullmatch(data):
            shown.append(
                f'<img class="model-image" alt="screenshot the model saw" data-hash="{escape(str(digest))}" '
                f'src="data:image/jpeg;base64,{data}">'
            )
        else:
            shown.append(f'<span class="model-image-missing">{escape(str(digest)[:12])}: no thumbnail recorded</span>')
    return f'<h5>The model saw</h5><div class="model-view">{"".join(shown)}</div>'


def _turn(turn, thumbnails: dict | None = None) -> str:
    parts = [
        f'<li class="turn"><div>reward: <span class="reward">{_fmt(float(turn.reward))}</span></div>',
        _model_view(turn, thumbnails or {}),
        f'<h5>Action</h5><pre class="action">{escape(turn.action)}</pre>',
        f'<h5>Observation</h5><pre class="observation">{escape(turn.observation)}</pre>',
    ]
    if turn.info.get("error"):
        parts.append(f'<h5>Error</h5><pre class="error turn-error">{escape(str(turn.info["error"]))}</pre>')
    screenshot = turn.info.get("screenshot")
    if isinstance(screenshot, str):
        data = "".join(screenshot.split())
        # Only well-formed base64 goes into the attribute, so the data cannot break out of it.
        if _BASE64.fullmatch(data):
            parts.append(f'<img class="screenshot" alt="screenshot" src="data:image/png;base64,{data}">')
        else:
            parts.append('<p class="screenshot-invalid">screenshot is not valid base64</p>')
    parts.append("</li>")
    return "".join(parts)


# ---------------------------------------------------------------------- branching evaluation
_METRICS = ("failures_per_1k_tokens", "failures", "distinct_failures", "tasks_with_failure", "episodes", "tokens")


def write_branching_report(run_dir: str | Path) -> Path:
    """Write ``report.html`` of a branching run (:mod:`agentgym.eval.branching`) from its ``summary.json`` and rows."""
    from agentgym.eval.harness import load_results

    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    path = run_dir / "report.html"
    path.write_text(render_branching_report(summary, load_results(run_dir)), encoding="utf-8")
    return path


def render_branching_report(summary: dict, rows: list[dict]) -> str:
    """The page of a branching run: failures per token of each mode over seeds, and each task's branch tree.

    A tree's node is an episode (a leaf of the search): its root played from reset, each child
    branched from a junction of its parent's path (the turn and the user behaviour it was
    steered to); failed episodes are marked, with their failure signature and the junction
    snapshot that replays them. Each node opens to its trajectory.
    """
    modes = [mode for mode in ("branching", "monte_carlo") if mode in summary]
    head = "".join(f"<th>{escape(mode)} (mean, 95% CI over seeds)</th>" for mode in modes)
    lines = [f'<table id="failure-metrics"><tr><th>metric</th>{head}</tr>']
    for metric in _METRICS:
        cells = []
        for mode in modes:
            value = summary[mode]["over_seeds"].get(metric)
            cells.append(f"<td>{_fmt(value['mean'])} {_ci(value['ci95'])}</td>" if value else "<td>-</td>")
        lines.append(f"<tr><td>{escape(metric)}</td>{''.join(cells)}</tr>")
    lines.append("</table>")
    ratio = summary.get("ratio") or {}
    if ratio:
        lines.append(
            f'<p id="ratio">branching / Monte Carlo failures per 1,000 tokens: {_fmt(ratio.get("failures_per_1k_tokens"))}'
            f" &middot; tasks with a failure, difference of means: {_fmt(ratio.get('tasks_with_failure_difference'))}</p>"
        )
    body = [
        f"<p>model {escape(str(summary.get('model')))} &middot; user {escape(str(summary.get('user')))}"
        f" &middot; token budget per task {_fmt(summary.get('config', {}).get('token_budget'))}</p>",
        "<h2>Failures found</h2>",
        *lines,
        "<h2>Branch trees</h2>",
    ]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        groups[(row["task_id"], row["mode"], row["seed"])].append(row)
    for (task_id, mode, seed), leaves in sorted(groups.items(), key=lambda kv: (_natural(str(kv[0][0])), kv[0][1:])):
        failed = sum(not r["success"] for r in leaves)
        body.append(
            f'<section class="tree" data-mode="{escape(mode)}"><h3>task {escape(str(task_id))} &middot; {escape(mode)} '
            f"&middot; seed {seed} &middot; {len(leaves)} episodes, {failed} failed</h3>{_tree(leaves, None)}</section>"
        )
    return _page(f"agentgym branching eval: {summary.get('suite', '')}", body)


def _tree(leaves: list[dict], parent: int | None) -> str:
    children = [r for r in leaves if r.get("parent_leaf") == parent]
    items = []
    for row in sorted(children, key=lambda r: r["leaf"]):
        mark = "&#10004;" if row["success"] else "&#10008;"
        origin = (
            "from reset"
            if row.get("junction") is None
            else f"branched at turn {row['junction_turn']} with <b>{escape(str(row['behaviour']))}</b>"
        )
        facts = f"{mark} episode {row['leaf']} &middot; {origin} &middot; behaviours {escape(', '.join(row['behaviours']) or '-')} &middot; {row['tokens']} tokens"
        if not row["success"]:
            facts += f" &middot; failure {escape(str(row['failure_signature']))}"
            if row.get("junction_file"):
                facts += f" &middot; replay from <code>{escape(row['junction_file'])}</code>"
        trajectory = Trajectory.from_dict(row["trajectory"])
        turns = "".join(_turn(turn) for turn in trajectory.turns)
        inner = _tree(leaves, row["leaf"])
        items.append(
            f'<li class="leaf" data-success="{str(row["success"]).lower()}"><details><summary>{facts}</summary>'
            f'<ol class="turns">{turns}</ol></details>{inner}</li>'
        )
    return f"<ul>{''.join(items)}</ul>" if items else ""
