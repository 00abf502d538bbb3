"""What a web agent sees: a pruned accessibility-style tree of the page with a stable id on every element it can act on, and an optional screenshot with Set-of-Marks boxes.

Ids live in the DOM as ``data-agentgym-id`` attributes, assigned in document order the first
time an element is observed and kept while it exists, so ``click(12)`` means the same element
on the next turn even if other elements appear. Each line of the tree is one element::

    [12] button "Add to cart"
    [13] textbox "Quantity" value="1" type=number
    [14] checkbox "Gift wrap" checked=false
    [15] combobox "Size" value="M" options=["S", "M", "L"]
      [16] span "nested text"

An element is shown when it can be acted on (links, buttons, form fields, elements with a click
handler attribute, a tabindex or an interactive ARIA role), when it is a heading, image or SVG
shape, or when it has text of its own. Invisible elements (``display: none``, ``hidden``, zero
size) are pruned. Indentation follows the shown ancestors.

:func:`element_id` finds an id in such text by role and name; scripted reference solutions use it.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "PageView",
    "element_id",
    "elements",
    "OBSERVE_JS",
    "CAPTURE_DOM_JS",
    "RESTORE_DOM_JS",
    "draw_marks",
    "decode_png",
]

#: Runs in the page: assigns ids, returns the tree lines, element boxes and the focused id.
OBSERVE_JS = r"""
(maxChars) => {
  const ATTR = 'data-agentgym-id';
  if (window.__agentgymNextId === undefined) window.__agentgymNextId = 1;
  const SKIP = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD', 'META', 'LINK', 'TITLE', 'BR']);
  const INTERACTIVE_ROLES = new Set(['button', 'link', 'checkbox', 'radio', 'textbox', 'combobox', 'listbox',
    'option', 'menuitem', 'menuitemcheckbox', 'menuitemradio', 'tab', 'switch', 'slider', 'spinbutton',
    'searchbox', 'treeitem', 'gridcell']);
  const NAMED_BY_CONTENT = new Set(['button', 'link', 'heading', 'option', 'menuitem', 'tab', 'cell',
    'columnheader', 'label', 'listitem', 'treeitem', 'summary']);
  const SHAPES = new Set(['circle', 'rect', 'ellipse', 'polygon', 'polyline', 'path', 'line', 'text']);
  const TEXT_TYPES = new Set(['text', 'email', 'password', 'search', 'tel', 'url', 'number', 'date',
    'time', 'datetime-local', 'month', 'week', '']);
  const clean = (s, n) => { s = (s || '').replace(/\s+/g, ' ').trim(); return s.length > n ? s.slice(0, n - 1) + '…' : s; };
  const quote = (s) => JSON.stringify(s);

  function role(el) {
    const explicit = el.getAttribute('role');
    if (explicit) return explicit.split(' ')[0];
    const tag = el.tagName.toLowerCase();
    if (el.namespaceURI === 'http://www.w3.org/2000/svg') return SHAPES.has(tag) ? 'svg-' + tag : (tag === 'svg' ? 'svg' : null);
    switch (tag) {
      case 'a': return el.hasAttribute('href') ? 'link' : 'a';
      case 'button': case 'summary': return 'button';
      case 'select': return el.multiple || el.size > 1 ? 'listbox' : 'combobox';
      case 'textarea': return 'textbox';
      case 'option': return 'option';
      case 'img': return 'img';
      case 'h1': case 'h2': case 'h3': case 'h4': case 'h5': case 'h6': return 'heading';
      case 'li': return 'listitem';
      case 'td': return 'cell';
      case 'th': return 'columnheader';
      case 'label': return 'label';
      case 'p': return 'paragraph';
      case 'input': {
        const type = (el.getAttribute('type') || 'text').toLowerCase();
        if (type === 'hidden') return null;
        if (['button', 'submit', 'reset', 'image'].includes(type)) return 'button';
        if (type === 'checkbox') return 'checkbox';
        if (type === 'radio') return 'radio';
        if (type === 'range') return 'slider';
        if (type === 'search') return 'searchbox';
        return 'textbox';
      }
    }
    if (el.isContentEditable && (el.parentElement === null || !el.parentElement.isContentEditable)) return 'textbox';
    return tag;
  }

  function directText(el) {
    let text = '';
    for (const child of el.childNodes) if (child.nodeType === 3) text += child.textContent + ' ';
    return text;
  }

  function labelText(label) {
    // A label that wraps its control (<label>Size <select>...</select></label>) would otherwise
    // name the control after all of its options.
    const copy = label.cloneNode(true);
    copy.querySelectorAll('select, textarea, input, button').forEach(control => control.remove());
    return copy.textContent;
  }

  function labelOf(el) {
    const aria = el.getAttribute('aria-label');
    if (aria) return aria;
    const by = el.getAttribute('aria-labelledby');
    if (by) return by.split(/\s+/).map(id => { const n = document.getElementById(id); return n ? n.innerText || n.textContent : ''; }).join(' ');
    if (el.labels && el.labels.length) return Array.from(el.labels).map(labelText).join(' ');
    return '';
  }

  function nameOf(el, r) {
    let name = labelOf(el);
    const tag = el.tagName.toLowerCase();
    if (!name && tag === 'input' && ['button', 'submit', 'reset'].includes((el.type || '').toLowerCase())) name = el.value || el.type;
    if (!name && (tag === 'img' || (tag === 'input' && el.type === 'image'))) name = el.getAttribute('alt') || '';
    if (!name && r === 'label') name = labelText(el);
    if (!name && NAMED_BY_CONTENT.has(r)) name = el.innerText !== undefined ? el.innerText : el.textContent;
    if (!name && el.namespaceURI === 'http://www.w3.org/2000/svg' && tag === 'text') name = el.textContent;
    if (!name && !['textbox', 'searchbox', 'combobox', 'listbox'].includes(r)) name = directText(el);
    if (!name) name = el.getAttribute('placeholder') || el.getAttribute('title') || '';
    return clean(name, 200);
  }

  function visible(el, style) {
    if (style.display === 'none' || style.visibility === 'hidden' || style.visibility === 'collapse') return false;
    if (el.hasAttribute('hidden') || el.getAttribute('aria-hidden') === 'true') return false;
    const box = el.getBoundingClientRect();
    return box.width > 0 || box.height > 0 || style.display === 'contents';
  }

  function interactive(el, r) {
    if (INTERACTIVE_ROLES.has(r)) return true;
    if (el.hasAttribute('onclick') || el.hasAttribute('onmousedown') || el.hasAttribute('onmouseup')) return true;
    const tabindex = el.getAttribute('tabindex');
    return tabindex !== null && Number(tabindex) >= 0;
  }

  function props(el, r) {
    const out = [];
    const tag = el.tagName.toLowerCase();
    if (r === 'heading') out.push('level=' + tag.slice(1));
    if (tag === 'input' || tag === 'textarea') {
      const type = (el.getAttribute('type') || (tag === 'textarea' ? 'textarea' : 'text')).toLowerCase();
      if (r === 'checkbox' || r === 'radio') out.push('checked=' + el.checked);
      else if (r !== 'button') {
        out.push('value=' + quote(clean(el.value, 200)));
        if (!['text', 'textarea'].includes(type)) out.push('type=' + type);
        if (el.placeholder && labelOf(el)) out.push('placeholder=' + quote(clean(el.placeholder, 60)));
      }
    }
    if (el.isContentEditable && r === 'textbox' && tag !== 'input' && tag !== 'textarea') out.push('value=' + quote(clean(el.innerText, 200)));
    if (tag === 'select') {
      const chosen = Array.from(el.selectedOptions).map(o => clean(o.text, 60));
      out.push('value=' + quote(chosen.join(', ')));
      out.push('options=[' + Array.from(el.options).map(o => quote(clean(o.text, 60))).join(', ') + ']');
    }
    if (el.getAttribute('aria-checked')) out.push('checked=' + el.getAttribute('aria-checked'));
    if (el.getAttribute('aria-selected') === 'true' || (tag === 'option' && el.selected)) out.push('selected');
    if (el.getAttribute('aria-expanded')) out.push('expanded=' + el.getAttribute('aria-expanded'));
    if (el.disabled || el.getAttribute('aria-disabled') === 'true') out.push('disabled');
    if (el.namespaceURI === 'http://www.w3.org/2000/svg') {
      for (const a of ['fill', 'stroke']) if (el.getAttribute(a) && el.getAttribute(a) !== 'none') out.push(a + '=' + quote(el.getAttribute(a)));
    }
    return out;
  }

  const lines = [];
  const boxes = {};
  let chars = 0;
  let truncated = false;

  function visit(el, depth, nameConsumed) {
    if (truncated || SKIP.has(el.tagName)) return;
    if (el.tagName === 'OPTION' && el.parentElement && el.parentElement.tagName === 'SELECT' && !el.parentElement.multiple) return;
    const style = window.getComputedStyle(el);
    if (!visible(el, style)) return;
    const r = role(el);
    if (r === null) return;
    const act = interactive(el, r);
    const name = nameOf(el, r);
    const own = clean(directText(el), 200);
    const shown = act || r === 'heading' || r === 'img' || r.startsWith('svg-') || (own && !nameConsumed) ||
                  (el.isContentEditable && r === 'textbox');
    let childDepth = depth;
    let consumed = nameConsumed;
    if (shown) {
      if (!el.hasAttribute(ATTR)) el.setAttribute(ATTR, String(window.__agentgymNextId++));
      const id = el.getAttribute(ATTR);
      const line = '  '.repeat(depth) + '[' + id + '] ' + r + (name ? ' ' + quote(name) : '') +
                   props(el, r).map(p => ' ' + p).join('');
      chars += line.length + 1;
      if (chars > maxChars) { truncated = true; return; }
      lines.push(line);
      const box = el.getBoundingClientRect();
      boxes[id] = [box.left, box.top, box.width, box.height];
      childDepth = depth + 1;
      consumed = nameConsumed || (NAMED_BY_CONTENT.has(r) && !labelOf(el));
    }
    for (const child of el.children) visit(child, childDepth, consumed);
  }
  if (document.body) visit(document.body, 0, false);
  const focused = document.activeElement && document.activeElement !== document.body
    ? document.activeElement.getAttribute(ATTR) : null;
  return {lines, boxes, focused, truncated, title: document.title,
          scroll: [window.scrollX, window.scrollY],
          size: [document.documentElement.scrollWidth, document.documentElement.scrollHeight]};
}
"""

#: Runs in the page: everything a reload would lose — ids, form values, focus, scroll, id counter.
CAPTURE_DOM_JS = r"""
() => {
  const ATTR = 'data-agentgym-id';
  const all = Array.from(document.querySelectorAll('*'));
  const focused = document.activeElement ? all.indexOf(document.activeElement) : -1;
  return {
    tags: all.map(el => el.tagName),
    ids: all.map(el => el.getAttribute(ATTR)),
    values: all.map(el => {
      if (el.tagName === 'INPUT') return ['checkbox', 'radio'].includes(el.type) ? el.checked : el.value;
      if (el.tagName === 'TEXTAREA') return el.value;
      if (el.tagName === 'SELECT') return Array.from(el.options).map(o => o.selected);
      return null;
    }),
    focused, scroll: [window.scrollX, window.scrollY],
    text: document.body ? document.body.innerText : '',
    nextId: window.__agentgymNextId === undefined ? null : window.__agentgymNextId,
  };
}
"""

#: Runs in the page: puts a :data:`CAPTURE_DOM_JS` capture back; false if the page's elements or text differ.
RESTORE_DOM_JS = r"""
(state) => {
  const ATTR = 'data-agentgym-id';
  const all = Array.from(document.querySelectorAll('*'));
  if (all.length !== state.tags.length || all.some((el, i) => el.tagName !== state.tags[i])) return false;
  if ((document.body ? document.body.innerText : '') !== state.text) return false;
  all.forEach((el, i) => {
    const id = state.ids[i];
    if (id === null) el.removeAttribute(ATTR); else el.setAttribute(ATTR, id);
    const value = state.values[i];
    if (value === null) return;
    if (el.tagName === 'INPUT' && ['checkbox', 'radio'].includes(el.type)) el.checked = value;
    else if (el.tagName === 'SELECT') Array.from(el.options).forEach((o, j) => { o.selected = !!value[j]; });
    else el.value = value;
  });
  if (state.nextId === null) delete window.__agentgymNextId; else window.__agentgymNextId = state.nextId;
  if (state.focused >= 0 && all[state.focused] && all[state.focused].focus) all[state.focused].focus();
  window.scrollTo(state.scroll[0], state.scroll[1]);
  return true;
}
"""

_LINE = re.compile(r'^(?P<indent> *)\[(?P<id>\d+)\] (?P<role>\S+)(?: (?P<name>"(?:[^"\\]|\\.)*"))?(?P<rest>.*)$')


@dataclass
class PageView:
    """One observation of one tab: the tree text and the boxes of the shown elements."""

    url: str
    title: str
    lines: list[str]
    boxes: dict[str, list[float]] = field(default_factory=dict)
    focused: str | None = None
    truncated: bool = False
    scroll: tuple[float, float] = (0.0, 0.0)

    @property
    def tree(self) -> str:
        text = "\n".join(self.lines) if self.lines else "(the page is empty)"
        return text + ("\n… (the page is longer; scroll or use more specific actions)" if self.truncated else "")


def elements(text: str) -> list[dict]:
    """Every element line of an observation: ``{"id", "role", "name", "rest", "depth"}``."""
    import json

    found = []
    for line in text.splitlines():
        match = _LINE.match(line)
        if match:
            name = json.loads(match["name"]) if match["name"] else ""
            found.append(
                {
                    "id": int(match["id"]),
                    "role": match["role"],
                    "name": name,
                    "rest": match["rest"].strip(),
                    "depth": len(match["indent"]) // 2,
                }
            )
    return found


def element_id(
    text: str,
    role: str | None = None,
    name: str | None = None,
    *,
    exact: bool = True,
    nth: int = 0,
    rest: str | None = None,
) -> int:
    """The id of the ``nth`` element with this role and name in an observation's text.

    ``exact=False`` matches names that contain ``name`` (case-insensitive); ``rest`` must be a
    substring of the line's properties (e.g. ``'value=""'``). Raises :class:`LookupError`,
    listing the candidates, when there is no such element.
    """
    matches = []
    for element in elements(text):
        if role is not None and element["role"] != role:
            continue
        if name is not None:
            if exact and element["name"] != name:
                continue
            if not exact and name.lower() not in element["name"].lower():
                continue
        if rest is not None and rest not in element["rest"]:
            continue
        matches.append(element["id"])
    if len(matches) <= nth:
        same_role = [
            f'[{e["id"]}] {e["role"]} "{e["name"]}"' for e in elements(text) if role is None or e["role"] == role
        ]
        raise LookupError(
            f"no element #{nth} with role={role!r} name={name!r} (exact={exact}); candidates: {same_role[:20]}"
        )
    return matches[nth]


def decode_png(data: bytes) -> np.ndarray:
    """A PNG screenshot as an H×W×3 uint8 array."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"), dtype=np.uint8)


def draw_marks(image: np.ndarray, boxes: dict[str, list[float]]) -> np.ndarray:
    """Set-of-Marks: each shown element's box and id drawn onto a copy of the screenshot."""
    from PIL import Image, ImageDraw

    canvas = Image.fromarray(image)
    draw = ImageDraw.Draw(canvas)
    height, width = image.shape[:2]
    for element_id_, (x, y, w, h) in boxes.items():
        if w <= 0 or h <= 0 or x >= width or y >= height or x + w <= 0 or y + h <= 0:
            continue
        draw.rectangle([x, y, x + w - 1, y + h - 1], outline=(255, 0, 64), width=1)
        label_width = 6 * len(element_id_) + 4
        draw.rectangle([x, max(0, y - 11), x + label_width, max(0, y - 11) + 11], fill=(255, 0, 64))
        draw.text((x + 2, max(0, y - 11)), element_id_, fill=(255, 255, 255))
    return np.asarray(canvas, dtype=np.uint8)
