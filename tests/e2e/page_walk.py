"""One walk through every registered page, as a reader takes it: the home page opened fresh
in one language and theme, then every other page by its sidebar link, each drawn to the end.
It gathers in that one visit of each page what several browser tests hold it to: an exception
box, the title, the favicon, a table that scrolls inside its box, a text below 4.5:1 contrast,
and every host the tab fetched from.

Measured on a quiet two-core box, the 14 pages past home: a fresh load of each (`goto`) 42 s
and 83 CPU-seconds (Chromium 62, the server 21); by the sidebar 16 s and 16 CPU-seconds. A
fresh load is still what the address-bar tests take (deep links, hostile links, a fresh
server); Streamlit's pages share one document, so the home page's fresh load fetches what
every page's would. Five walks of the same pages (renders, tables, contrast twice, hosts
twice) became two (tests/e2e/test_every_page.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from pclab.ui.pages import HOME, PAGES
from tests.e2e.conftest import screenshot, wait_for_app

TEXT_CONTRAST = 4.5  # WCAG 1.4.3, normal text
TABLES = """() => {
  const found = [];
  const selectors = ['[data-testid=stTable]', '[data-testid=stDataFrame] .dvn-scroller'];
  for (const el of document.querySelectorAll(selectors.join(', '))) {
    if (!el.getBoundingClientRect().width || el.closest('details:not([open])')) continue;
    if (el.scrollWidth > el.clientWidth + 1) {
      const text = (el.innerText || '').trim().slice(0, 40);
      found.push(`${el.scrollWidth} > ${el.clientWidth}: ${text}`);
    }
  }
  return found;
}"""
# Each text node's colour (its alpha laid over the background) against the background: the
# element's own and its ancestors' background colours composited over the page, counting
# only the boxes the text sits in (a slider's value label is drawn above its thumb).
CONTRAST = r"""(minimum) => {
  const parse = (c) => {
    const m = c && c.match(/rgba?\(([^)]+)\)/);
    if (!m) return null;
    const p = m[1].split(/[\s,\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const lin = (x) => {
    x /= 255;
    return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4);
  };
  const lum = (c) => 0.2126 * lin(c[0]) + 0.7152 * lin(c[1]) + 0.0722 * lin(c[2]);
  const ratio = (a, b) => {
    const x = lum(a), y = lum(b);
    return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05);
  };
  const over = (top, under) => [0, 1, 2].map((i) => top[i] * top[3] + under[i] * (1 - top[3]));
  const page = parse(getComputedStyle(document.querySelector('.stApp')).backgroundColor);
  const behind = (el) => {
    const layers = [];
    const box = el.getBoundingClientRect();
    const x = box.left + box.width / 2, y = box.top + box.height / 2;
    for (let e = el; e; e = e.parentElement) {
      const r = e.getBoundingClientRect();
      if (x < r.left || x > r.right || y < r.top || y > r.bottom) continue;
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
    }
    let base = page.slice(0, 3);
    for (let i = layers.length - 1; i >= 0; i--) base = over(layers[i], base);
    return base;
  };
  const skip = 'svg, canvas, details:not([open]), [data-testid=stDataFrame], '
    + '[aria-hidden=true], .katex-mathml, [disabled], [aria-disabled=true]';
  const found = new Map();
  for (const root of document.querySelectorAll('[data-testid=stMain], [data-testid=stSidebar]')) {
    for (const el of root.querySelectorAll('*')) {
      if (el.closest(skip)) continue;
      const own = [...el.childNodes].filter((n) => n.nodeType === 3 && n.textContent.trim());
      if (!own.length) continue;
      const box = el.getBoundingClientRect();
      const style = getComputedStyle(el);
      if (!box.width || !box.height || style.visibility === 'hidden') continue;
      const bg = behind(el);
      const fg = parse(style.color);
      const r = ratio(fg[3] < 1 ? over(fg, bg) : fg.slice(0, 3), bg);
      if (r < minimum) {
        const where = el.closest('[data-testid]')?.dataset.testid;
        const key = `${style.color} on ${bg.map(Math.round)} [${where}]`;
        const text = own[0].textContent.trim().slice(0, 30);
        if (!found.has(key)) found.set(key, `${r.toFixed(2)}:1 ${key} ${el.tagName}: ${text}`);
      }
    }
  }
  return [...found.values()];
}"""


@dataclass
class PageSeen:
    """What one visit of one page showed (`address`: the tab's URL once it was drawn)."""

    path: str
    address: str
    exceptions: int
    title: str
    favicon: str
    scrolling_tables: list[str]
    low_contrast: list[str]


@dataclass
class Walk:
    """Every page of one walk, in PAGES' order, and every host the tab fetched from
    (scheme://host:port; a data: or blob: URL fetches nothing and is not recorded)."""

    lang: str
    scheme: str
    pages: dict[str, PageSeen] = field(default_factory=dict)
    fetched: list[str] = field(default_factory=list)


def registered_url_paths() -> list[str]:
    """URL paths of the registered pages (ui.pages; home is the root)."""
    return ["" if page is HOME else page.url for page in PAGES]


def walk_every_page(browser, app_url: str, lang: str, scheme: str, shots: bool) -> Walk:
    """Open the home page fresh at 1400 x 900 in `lang` and `scheme`, then each other page by
    its sidebar link, and note what each showed; `shots`: a full-page screenshot of each."""
    locale = "zh-CN" if lang == "zh" else "en-US"
    context = browser.new_context(
        viewport={"width": 1400, "height": 900}, locale=locale, color_scheme=scheme
    )
    seen = Walk(lang, scheme)
    try:
        tab = context.new_page()
        tab.set_default_timeout(60_000)

        def fetched(request) -> None:
            url = urlsplit(request.url)
            if url.scheme not in ("data", "blob"):
                seen.fetched.append(f"{url.scheme}://{url.netloc}")

        tab.on("request", fetched)
        for page, path in zip(PAGES, registered_url_paths(), strict=True):
            if page is HOME:
                tab.goto(f"{app_url}/?lang={lang}")
            else:
                tab.locator(f'[data-testid="stSidebarNav"] a[href$="/{path}"]').click()
                tab.wait_for_function(f"() => location.pathname.endsWith('/{path}')")
            wait_for_app(tab)
            seen.pages[page.key] = PageSeen(
                path=path,
                address=tab.url,
                exceptions=tab.locator('[data-testid="stException"]').count(),
                title=tab.locator("h1").first.inner_text(),
                favicon=tab.evaluate(
                    "() => document.querySelector(\"link[rel='shortcut icon']\").href"
                ),
                scrolling_tables=tab.evaluate(TABLES),
                low_contrast=tab.evaluate(CONTRAST, TEXT_CONTRAST),
            )
            if shots:
                screenshot(tab, f"page-{path or 'home'}-{lang}")
    finally:
        context.close()
    return seen
