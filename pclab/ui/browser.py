"""The browser side every page shares: a room-ready layout, the copy-link button with its
fallback, and Streamlit's own range hints in the reader's language.

A workshop runs on a projector (often 800-1100 px wide) or a split screen, over plain http
from the instructor's laptop. So:
- below NARROW_PX the sidebar starts collapsed and closes again after each navigation (a
  reader who opens it keeps it open until they pick a page), columns wrap instead of
  squeezing their labels mid-word, metrics and formulas get room instead of an ellipsis,
  tables wrap their cells and wide charts scroll inside their own frame;
- the copy button uses the clipboard where the browser gives one (https, localhost) and
  otherwise shows the link selected in a field, saying why;
- one action of the reader's is one browser-history entry, so Back returns to the page before
  (Streamlit's frontend pushes a page change and the script's URL writes after it apart);
- a number typed outside an input's range gets the reason in the page's language:
  Streamlit's frontend writes it (and its "Press Enter to apply" hint) in English, so the
  script rewrites those messages as they appear.

No Streamlit page state here: the texts come from the caller (ui.page_header), already translated.
"""

from __future__ import annotations

import html
import json

import streamlit as st

NARROW_PX = 1100
# The labels' underline on the Full Transformer page: 3.3:1 on a white page, 5.7:1 on
# Streamlit's dark one (WCAG's 3:1 for a graphic that carries meaning, in both themes).
LABEL_MARK = "#d9730d"
# Streamlit's dark theme draws a selected segment and the active tab in its red (3.6:1 on the
# segment's dark red, 3.9:1 on the page) and code line numbers at 40 % (3.3:1): this pink
# reads at 8:1 on both (and on the page for a slider's value, 3.9:1 before), the numbers at
# 70 % at 7:1; the code's blue (4.0:1) and grey (4.2:1) get lighter shades (WCAG's 4.5:1).
DARK_ACCENT_TEXT = "#ff9aa2"
# In the light theme the segment's red is 4.48:1 and the code's colours 2.2-3.6:1 on its grey:
# GitHub's light palette, each at least 4.6:1 on #f7f7f6.
LIGHT_ACCENT_TEXT = "#a4262c"
LIGHT_TOKENS = {
    "#1a7f37": ("string", "boolean", "triple-quoted-string"),
    "#0550ae": ("keyword", "builtin", "parameter", "variable", "class-name", "function"),
    "#57606a": ("punctuation", "comment"),
    "#953800": ("operator", "decorator"),
    "#0a6b5e": ("number",),
}
DARK_TOKENS = {  # the dark theme's blue (4.0:1) and grey (4.2:1), lighter
    "#6cb6ff": ("keyword", "builtin", "parameter", "variable", "class-name", "function"),
    "#a8adbd": ("punctuation", "comment"),
}


def _token_colours(colours: dict[str, tuple[str, ...]]) -> str:
    return "\n".join(
        f'  [data-testid="stCode"] .token.{name} {{ color: {colour}; }}'
        for colour, names in colours.items()
        for name in names
    )


LIGHT_CODE, DARK_CODE = _token_colours(LIGHT_TOKENS), _token_colours(DARK_TOKENS)

# Wrap before squeezing: a column narrower than this moves to the next row (Streamlit's
# horizontal blocks already wrap; its columns only lack a minimum width). Metrics get a
# wider minimum and a smaller figure on narrow screens; display formulas scroll rather than
# being cut. Choice widgets wrap their options.
CSS = f"""
[data-testid="stColumn"] {{ min-width: min(100%, 9.5rem); }}
[data-testid="stColumn"]:has([data-testid="stMetric"]) {{ min-width: min(100%, 12rem); }}
[data-testid="stMetricValue"] > div {{ text-overflow: clip; }}
[data-testid="stMetricLabel"] * {{ white-space: normal; overflow: visible; text-overflow: clip; }}
[data-testid="stWidgetLabel"] p {{ overflow-wrap: normal; word-break: normal; }}
.katex-display {{ overflow-x: auto; overflow-y: hidden; padding-bottom: 0.2rem; }}
[data-testid="stButtonGroup"] > div {{ flex-wrap: wrap; }}
button.pcl-share {{
  font: inherit; font-size: 0.85rem; padding: 0.25rem 0.7rem; border-radius: 0.5rem;
  border: 1px solid rgba(128, 128, 128, 0.45); background: transparent; color: inherit;
  cursor: pointer;
}}
.pcl-share-fallback {{ margin-top: 0.5rem; font-size: 0.85rem; }}
.pcl-label {{
  background: rgba(217, 115, 13, 0.2); border-bottom: 3px solid {LABEL_MARK};
  border-radius: 2px; padding: 0 1px;
}}
[data-testid="stTable"] {{ overflow-x: auto; }}
[data-testid="stTable"] td, [data-testid="stTable"] th {{
  white-space: normal; overflow-wrap: break-word; word-break: normal;
}}
[data-testid="stVegaLiteChart"] {{ max-width: 100%; overflow-x: auto; }}
[data-testid="stCode"] pre, [data-testid="stCode"] pre code {{
  white-space: pre-wrap !important; overflow-wrap: anywhere;  /* the highlighter's inline pre */
}}
[data-testid="stTable"] th {{ word-break: keep-all; }}
.pcl-share-fallback input {{
  width: 100%; font: inherit; padding: 0.35rem 0.5rem; border-radius: 0.4rem;
  border: 1px solid rgba(128, 128, 128, 0.6); background: transparent; color: inherit;
}}
@media (prefers-color-scheme: light) {{
  [data-testid="stButtonGroup"] button[aria-checked="true"] * {{ color: {LIGHT_ACCENT_TEXT}; }}
  [data-testid="stTab"][aria-selected="true"] * {{ color: {LIGHT_ACCENT_TEXT}; }}
  [data-testid="stCode"] .linenumber {{ color: rgba(47, 45, 43, 0.75) !important; }}
{LIGHT_CODE}
}}
@media (prefers-color-scheme: dark) {{
  [data-testid="stButtonGroup"] button[aria-checked="true"] * {{ color: {DARK_ACCENT_TEXT}; }}
  [data-testid="stTab"][aria-selected="true"] * {{ color: {DARK_ACCENT_TEXT}; }}
  [data-testid="stCode"] .linenumber {{ color: rgba(237, 235, 232, 0.7) !important; }}
  [data-testid="stSliderThumbValue"] * {{ color: {DARK_ACCENT_TEXT}; }}
{DARK_CODE}
}}
@media (max-width: {NARROW_PX}px) {{
  [data-testid="stMetricValue"] {{ font-size: 1.6rem; }}
  h1 {{ font-size: 2.1rem; }}
}}
"""

# Runs once per page load (guarded by a window flag): below NARROW_PX, collapse the sidebar on
# the first visit and again after every navigation (a room follows the instructor page by
# page through the sidebar: left open, it would take half of a projector's width), and
# rewrite the frontend's English range message wherever it appears.
SCRIPT = r"""
window.pclTexts = %(texts)s;
if (!window.pclRoomReady) {
  window.pclRoomReady = true;
  // One action of the reader's, one history entry. Streamlit's frontend pushes an entry for
  // a page change and another for each query parameter the script then writes (the page
  // opened puts ?lang= back: Streamlit dropped it), in either order: Back landed on the page
  // just opened, or on the old one with the new one's parameters. A push with no pointer or
  // key input since the last one (or since Back) belongs to that action: it replaces.
  let acted = false;
  for (const kind of ["pointerdown", "keydown"]) {
    window.addEventListener(kind, () => { acted = true; }, true);
  }
  window.addEventListener("popstate", () => { acted = false; });
  const push = history.pushState.bind(history), replace = history.replaceState.bind(history);
  history.pushState = (state, title, url) => {
    const own = acted;
    acted = false;
    return own ? push(state, title, url) : replace(state, title, url);
  };
  const sidebar = () => document.querySelector('[data-testid="stSidebar"]');
  let request = 0;  // the latest navigation's number: a reader's own click cancels it
  const collapse = (asked, tries) => {
    if (asked !== request || window.innerWidth >= %(narrow)d) return;
    const bar = sidebar();
    const button = document.querySelector('[data-testid="stSidebarCollapseButton"] button');
    if (bar && button) {
      if (bar.getAttribute("data-collapsed") !== "true") button.click();
    } else if (tries > 0) {
      setTimeout(() => collapse(asked, tries - 1), 100);
    }
  };
  collapse(request, 50);
  let shownPath = window.location.pathname;
  const navigated = () => {  // a new page (sidebar, page link, back button): close it again
    if (window.location.pathname === shownPath) return;
    shownPath = window.location.pathname;
    request += 1;
    collapse(request, 50);
  };
  document.addEventListener("click", (event) => {  // opened by hand: stays open till a page
    if (event.target.closest('[data-testid="stExpandSidebarButton"]')) request += 1;
  }, true);
  window.addEventListener("popstate", navigated);
  const range = new RegExp([
    "Number is (outside|below|above) the allowed range\\.(?: Please enter a value ",
    "(?:between (\\S+) and (\\S+)|greater than or equal to (\\S+)",
    "|less than or equal to (\\S+))\\.)?",
  ].join(""));
  const rewrite = (node) => {
    const walker = document.createTreeWalker(node, NodeFilter.SHOW_TEXT);
    for (let text = walker.currentNode; text; text = walker.nextNode()) {
      if (text.nodeType !== 3) continue;
      const t = window.pclTexts;
      // Assign only a changed text: an assignment is itself a mutation this observer sees.
      if (text.nodeValue.trim() === "Press Enter to apply") {
        if (t.press_enter !== "Press Enter to apply") text.nodeValue = t.press_enter;
        continue;
      }
      const m = text.nodeValue.match(range);
      if (!m) continue;
      const said = m[2] ? t.between.replace("{low}", m[2]).replace("{high}", m[3])
        : m[4] ? t.at_least.replace("{low}", m[4])
        : m[5] ? t.at_most.replace("{high}", m[5]) : t.outside;
      // The message comes as "Error: message" in one text node, or after a bold "Error".
      text.nodeValue = text.nodeValue.replace(m[0], said).replace(/^Error:/, t.error + ":");
      const before = text.previousSibling;
      if (before && before.textContent === "Error" && t.error !== "Error") {
        before.textContent = t.error;
      }
    }
  };
  new MutationObserver((records) => {
    navigated();
    for (const record of records) {
      if (record.type === "characterData") rewrite(record.target);
      record.addedNodes.forEach(rewrite);
    }
  }).observe(document.body, {childList: true, subtree: true, characterData: true});
}
"""

SHARE = """<button class="pcl-share" type="button" title="%(label_attr)s">%(label)s</button>
<div class="pcl-share-fallback" hidden>
  <div class="pcl-share-note" role="status"></div>
  <input class="pcl-share-link" type="text" readonly aria-label="%(field_attr)s">
</div>
<script>
document.querySelectorAll("button.pcl-share:not([data-bound])").forEach((button) => {
  button.dataset.bound = "1";
  const box = button.nextElementSibling;
  const field = box.querySelector("input"), note = box.querySelector(".pcl-share-note");
  const texts = %(texts)s;
  const showField = (link) => {
    field.value = link;
    box.hidden = false;
    field.focus();
    field.select();
    let copied = false;
    try { copied = document.execCommand("copy"); } catch (error) { copied = false; }
    note.textContent = copied ? texts.copied_here : texts.copy_yourself;
    box.dataset.state = copied ? "copied" : "manual";
  };
  button.addEventListener("click", () => {
    // A live room's presenter key and a participant's seat stay private (ui/room_panel.py)
    const url = new URL(window.location.href);
    url.searchParams.delete("host");
    url.searchParams.delete("seat");
    const link = url.toString();
    if (!window.isSecureContext || !navigator.clipboard) { showField(link); return; }
    navigator.clipboard.writeText(link).then(
      () => { button.textContent = texts.copied; box.hidden = true; },
      () => showField(link));
  });
});
</script>"""


# A status element still drawn "running" after its script stopped (Stop pressed, or an input
# changed mid-run) is stale: no script can update it any more (Streamlit raises its stop on
# every later call). While no script runs, its spinner goes and the label says so.
STALE_STATUS = """
.stApp[data-test-script-state="notRunning"] [data-testid="stExpanderIconSpinner"] {
  display: none;
}
.stApp[data-test-script-state="notRunning"]
  summary:has([data-testid="stExpanderIconSpinner"])::after {
  content: %s; margin-left: 0.5rem; font-weight: 600; color: #b3261e;
}
"""


def room_support(range_texts: dict[str, str], stopped: str) -> None:
    """The shared CSS (no space on the page) and the room script (in the sidebar, where an
    empty element costs no reading space). `range_texts`: between / at_least / at_most /
    outside (with {low} and {high} placeholders), error and press_enter; `stopped`: what a
    run's status reads once its script has stopped."""
    stale = STALE_STATUS % json.dumps(stopped, ensure_ascii=False)
    st.html(f"<style>{CSS}{stale}</style>")
    script = SCRIPT % {"texts": json.dumps(range_texts, ensure_ascii=False), "narrow": NARROW_PX}
    st.sidebar.html(f"<script>{script}</script>", unsafe_allow_javascript=True)


def share_button(texts: dict[str, str]) -> None:
    """A button that copies the page's current address. Every input is carried in the URL
    (see ui.deeplink), so the browser's own location *is* the scenario: reading it at click
    time, rather than rebuilding it on the server, keeps it exact.

    Without a clipboard (plain http at a network address: a classroom) it shows the link in
    a selectable field, selected, and says so. `texts`: label, copied, field, copied_here,
    copy_yourself."""
    st.html(
        SHARE
        % {
            "label": html.escape(texts["label"]),
            "label_attr": html.escape(texts["label"], quote=True),
            "field_attr": html.escape(texts["field"], quote=True),
            "texts": json.dumps(texts, ensure_ascii=False),
        },
        unsafe_allow_javascript=True,
    )
