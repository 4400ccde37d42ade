"""The hostile-visitor probe of issue 34, repeatable: a real server on loopback, Chromium, and
every finding a row that passes or fails.

    python -m bench.probe [--quick]          # JSON on stdout (full: ~470 page loads)
    python -m bench --only probe [--quick]   # the same, as BENCHMARKS.md's "probe" section

links     every page opened with markup (`<b>`, `<script>`, `javascript:` links, an image, a
          colour directive), bidi overrides and other format characters (Unicode Cf),
          5,000-digit numbers, 1e308, -0, NaN and empty values in its deep-link parameters
          (found on the page itself: each widget's `st-key-*`, plus the tables the sections
          carry in one parameter): no payload rendered as markup or run as script, no Python
          message or traceback, no Streamlit exception box, the Run button still there, no
          format character in the page's text
paths     ~28 path tricks (`/..%2f`, `//evil.example`, encoded slashes, unknown pages) over
          plain HTTP: no file from outside the app served, no redirect off the host
settings  each malformed PCL_* setting stops `pclab serve` with one line before it listens
hosts     every request any of those page loads made went to the lab's own host and port
faults    SIGKILL / SIGTERM of a rank, a zygote and the server during a run, and a refused
          Run admitted again (bench/probe_faults.py)
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import itertools
import json
import os
import re
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote, urlsplit

from bench import ROOT, exit_on_sigterm, loadavg, probe_faults, report
from bench.cold_start import CHROMIUM, CHROMIUM_ARGS, free_port
from bench.hosted import Server, _prefix, _settle
from bench.report import Goal, Section, duration, now
from pclab.ui.pages import HOME, PAGES
from pclab.ui.plain_text import WORD_JOINER

MARKER = "zq9x"
MARKUP = (
    f"<b>{MARKER}</b>",
    f"<script>window.__zq=1</script>{MARKER}",
    f"[{MARKER}](javascript:window.__zq=1)",
    f"<a href=javascript:window.__zq=1>{MARKER}</a>",
    f"<img src=x onerror=window.__zq=1>{MARKER}",
    f"![{MARKER}](https://evil.example/a.png)",
    f":red[**{MARKER}**] www.evil.example",
)
BIDI = "".join(map(chr, [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]))
OTHER_CF = "\u200b\u200c\u200d\u200e\u200f\u061c\u00ad\ufeff\U000e0041"
FORMATS = (f"{BIDI[4]}noitcudorp ot efas{MARKER}", f"{MARKER}{BIDI}{OTHER_CF}1")
EXTREMES = ("9" * 5000, "-" + "9" * 5000, "1e308", "-1e308", "-0", "NaN", "inf", "")
URL_LIMIT = 60_000  # characters of query per load (Tornado refuses a request over 64 KB)
TABLE_KEY = re.compile(r"deeplink\.table(?:_to_url)?\(\s*\"(\w+)\"")
RUN_BUTTONS = {  # each page with a Run button: its label's catalogue key
    "parameters": "parameters.run.button",
    "experiment": "experiment.run.button",
    "validation": "validation.torchrun.button",
    "clipping": "clipping.run_button",
    "coordinated-step": "clipping.run_button",
    "check-trainer": "check.run.button",
}
PYTHON_WORDS = ("Traceback", "NoneType", "unsupported operand", "object is not", "Error: ")
# What the page shows that it should not: rendered payload, script run, exception, Cf chars.
INSPECT = """([marker, joiner]) => {
    const bad = [];
    for (const e of document.querySelectorAll('b, strong, em, a, img, script, code, span')) {
        const own = [...e.childNodes].some(n => n.nodeType === 3 && n.data.includes(marker));
        const tag = e.tagName.toLowerCase();
        if (own && tag !== 'span') bad.push(tag + ' holds the marker');
        const look = (e.getAttribute('style') || '') + (e.getAttribute('class') || '');
        if (tag === 'span' && own && /colou?r/i.test(look)) bad.push('colour');
        const href = e.getAttribute('href') || '', src = e.getAttribute('src') || '';
        if (/^\\s*javascript:|evil/i.test(href)) bad.push('link to ' + href.slice(0, 40));
        if (/evil|^x$/.test(src)) bad.push('image ' + src.slice(0, 40));
    }
    if (window.__zq) bad.push('the payload ran as script');
    const text = document.body.innerText;
    const code = c => 'U+' + c.codePointAt(0).toString(16).toUpperCase();
    const cf = [...text].filter(c => c !== joiner && /\\p{Cf}/u.test(c)).map(code);
    const near = [];  // format characters within 80 characters of an echoed marker
    for (let i = text.indexOf(marker); i >= 0; i = text.indexOf(marker, i + 1)) {
        const around = [...text.slice(Math.max(0, i - 80), i + 80)];
        near.push(...around.filter(c => c !== joiner && /\\p{Cf}/u.test(c)).map(code));
    }
    return {bad, cf: [...new Set(cf)], near: [...new Set(near)], text: text.slice(0, 200000),
            exceptions: document.querySelectorAll('[data-testid=stException]').length};
}"""


def page_path(page) -> str:
    return "" if page is HOME else page.url


def table_keys() -> dict[str, tuple[str, ...]]:
    """Page url -> the tables its section carries in one link parameter (from the code)."""
    out = {}
    for page in PAGES:
        source = (ROOT / page.file).read_text(encoding="utf-8")
        out[page.url] = tuple(sorted(set(TABLE_KEY.findall(source))))
    return out


# The keys of the page's input widgets (a button's, a download's or a container's key never
# reads the URL): Streamlit names each keyed element's container `st-key-<key>`.
KEYS_JS = """() => [...new Set([
    ...document.querySelectorAll('.stElementContainer[class*="st-key-"]')]
    .filter(e => !e.querySelector('[data-testid=stButton], [data-testid=stDownloadButton],'
        + ' [data-testid=stFormSubmitButton], [data-testid=stPopover]'))
    .flatMap(e => [...e.classList]).filter(c => c.startsWith('st-key-'))
    .map(c => c.slice(7)))]"""


def link_keys(found: list[str], tables: tuple[str, ...]) -> tuple[str, ...]:
    """The deep-link parameters among a page's widget keys: `prefix_name` identifiers (a
    button's key has dots), not an exercise's guess, not the shared language and mode."""
    keys = {k for k in found if re.fullmatch(r"[a-z]+_[a-z0-9_]+", k)}
    keys -= {k for k in keys if k.endswith("_guess")}
    return tuple(sorted(keys | set(tables)))


def link_loads(keys: dict[str, tuple[str, ...]], quick: bool) -> list[tuple[str, str, str]]:
    """(page url, label, query) of every load: each payload in every key of a page at once,
    then (full mode) each key alone: empty, with format characters, with 5,000 digits."""
    payloads = (
        (MARKUP[0], MARKUP[4], FORMATS[1], EXTREMES[0], "")
        if quick
        else (MARKUP + FORMATS + EXTREMES)
    )
    per_page = []
    for url, names in keys.items():
        loads = []
        for value in payloads if names else payloads[:1]:
            for group in _groups(names, len(quote(value))):
                query = "&".join(f"{k}={quote(value)}" for k in group) or f"x={quote(value)}"
                loads.append((url, f"{_which(group, names)} = {value[:24]!r}", query))
        for name in names if not quick else names[:1]:
            loads.append((url, f"{name} empty", f"{name}="))
            if not quick:
                loads.append((url, f"{name} = format chars", f"{name}={quote(FORMATS[0])}"))
                loads.append((url, f"{name} = 5,000 digits", f"{name}={EXTREMES[0]}"))
        per_page.append(loads)
    # Round robin over the pages: a time limit that cuts the probe short cuts every page.
    return [load for turn in itertools.zip_longest(*per_page) for load in turn if load]


def _groups(names: tuple[str, ...], size: int) -> list[tuple[str, ...]]:
    """The keys in as few groups as keep a query under the server's 64 KB header limit
    (Tornado answers a longer request line with an error page, not the app)."""
    per = max(1, URL_LIMIT // (size + 24))
    return [names[i : i + per] for i in range(0, len(names), per)] or [()]


def _which(group: tuple[str, ...], names: tuple[str, ...]) -> str:
    return "all keys" if group == names else f"keys {group[0]}..{group[-1]}"


def judge(seen: dict, url: str, clean: set[str]) -> list[str]:
    """What a load showed that it must not: the problems, [] for none. `clean`: the format
    characters the page shows without a link (Streamlit's own, e.g. U+200B in its widgets)."""
    problems = list(seen["bad"])
    new = sorted(set(seen["cf"]) - clean | set(seen["near"]))
    if new:
        problems.append("format characters in the page: " + " ".join(new))
    if seen["exceptions"]:
        problems.append("a Streamlit exception box")
    problems += [f"Python text {w!r}" for w in PYTHON_WORDS if w in seen["text"]]
    if url in RUN_BUTTONS and not seen.get("run_button"):
        problems.append("no Run button")
    return problems


async def _load(context, base: str, load, clean: set[str], timeout_s: float) -> dict:
    url, label, query = load
    tab = await context.new_page()
    try:
        await tab.goto(f"{base}/{'' if url == HOME.url else url}?{query}", timeout=timeout_s * 1e3)
        await _settle(tab, timeout_s)
        seen = await tab.evaluate(INSPECT, [MARKER, WORD_JOINER])
        if url in RUN_BUTTONS:
            button = tab.get_by_role("button", name=_prefix(RUN_BUTTONS[url]))
            seen["run_button"] = await button.count() > 0
        problems = judge(seen, url, clean)
    except Exception as exc:  # noqa: BLE001 - a page that never settles is a finding
        problems = [f"no page: {str(exc).splitlines()[0][:120]}"]
    finally:
        await tab.close()
    print(f"{url} {label}: {'; '.join(problems) or 'ok'}", file=sys.stderr, flush=True)
    return {"page": url, "load": label, "problems": problems}


def _origin(url: str) -> str:
    """scheme://host:port of a request ("" for data: and blob: URLs, which fetch nothing)."""
    split = urlsplit(url)
    return "" if split.scheme in ("data", "blob") else f"{split.scheme}://{split.netloc}"


async def _browse(
    base: str, quick: bool, tabs: int, limit_s: float, timeout_s: float = 120.0
) -> dict:
    """Discover each page's keys, then every load, `tabs` at a time, none started after
    `limit_s` (those are counted as skipped); every host requested."""
    from playwright.async_api import async_playwright

    own = urlsplit(base).netloc
    hosts: set[str] = set()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = await browser.new_context(viewport={"width": 1400, "height": 1000})
        context.on("request", lambda request: hosts.add(_origin(request.url)))
        tables, keys, clean = table_keys(), {}, {}
        for page in PAGES:  # each page without a link: its keys, its own format characters
            tab = await context.new_page()
            await tab.goto(f"{base}/{page_path(page)}")
            await _settle(tab, timeout_s)
            keys[page.url] = link_keys(await tab.evaluate(KEYS_JS), tables[page.url])
            clean[page.url] = set((await tab.evaluate(INSPECT, [MARKER, WORD_JOINER]))["cf"])
            await tab.close()
        gate, stop_at = asyncio.Semaphore(tabs), time.monotonic() + limit_s

        async def one(load):
            async with gate:
                if time.monotonic() > stop_at:
                    return {"page": load[0], "load": load[1], "problems": [], "skipped": True}
                return await _load(context, base, load, clean[load[0]], timeout_s)

        results = await asyncio.gather(*(one(x) for x in link_loads(keys, quick)))
        await browser.close()
    foreign = sorted(h for h in hosts if h and not h.endswith(f"://{own}"))
    own_cf = {url: sorted(chars) for url, chars in clean.items() if chars}
    return {
        "keys": keys,
        "loads": results,
        "hosts": sorted(hosts),
        "foreign": foreign,
        "own_format_chars": own_cf,
    }


# ---------------------------------------------------------------- paths over plain HTTP

PATHS = (
    "/..%2f..%2f..%2fetc%2fpasswd",
    "/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "/../../../etc/passwd",
    "//evil.example",
    "//evil.example/%2e%2e",
    "/%2f%2fevil.example",
    "/%5cevil.example",
    "/\\evil.example",
    "/http://evil.example",
    "/static/..%2f..%2fapp.py",
    "/static/../../app.py",
    "/static/%2e%2e/%2e%2e/pclab/cli.py",
    "/app/static/..%2f..%2fREADME.md",
    "/app/static/%2e%2e%2f%2e%2e%2fapp.py",
    "/media/..%2f..%2fapp.py",
    "/_stcore/..%2f..%2fetc%2fpasswd",
    "/component/..%2f..%2fapp.py",
    "/experiment/..%2f..%2fapp.py",
    "/app.py",
    "/pclab/sections/home.py",
    "/.git/config",
    "/.streamlit/config.toml",
    "/no-such-page",
    "/no-such-page/deeper?x=<b>zq9x</b>",
    "/%00",
    "/favicon.ico/..%2f..%2fapp.py",
    "/_stcore/health/..%2f..%2fapp.py",
    "/?lang=../../etc/passwd",
)


def secrets() -> dict[str, str]:
    """A line of each file outside the app's served assets, as it would appear if served."""
    out = {"/etc/passwd": "root:x:0:0"}
    for name in ("app.py", "README.md", "pclab/cli.py", ".streamlit/config.toml", ".git/config"):
        path = ROOT / name
        if path.is_file():
            lines = [ln for ln in path.read_text(errors="replace").splitlines() if len(ln) > 12]
            out[name] = lines[0] if lines else ""
    return {k: v for k, v in out.items() if v}


def probe_path(host: str, port: int, path: str, known: dict[str, str]) -> dict:
    """One raw request (no redirect followed): the status and what is wrong with the answer."""
    connection = http.client.HTTPConnection(host, port, timeout=30)
    try:
        connection.putrequest("GET", path, skip_accept_encoding=True)
        connection.endheaders()
        response = connection.getresponse()
        body = response.read(2_000_000).decode(errors="replace")
        status, location = response.status, response.getheader("Location") or ""
    except OSError as exc:
        return {"path": path, "status": None, "problems": [f"no answer: {exc}"]}
    finally:
        connection.close()
    problems = [f"serves {name}" for name, line in known.items() if line in body]
    target = urlsplit(location)
    if location and (target.netloc not in ("", f"{host}:{port}") or location.startswith("//")):
        problems.append(f"redirect off the host: {location[:80]}")
    if status >= 500:
        problems.append(f"status {status}")
    return {"path": path, "status": status, "location": location[:80], "problems": problems}


def probe_paths(url: str) -> list[dict]:
    split, known = urlsplit(url), secrets()
    return [probe_path(split.hostname, split.port, p, known) for p in PATHS]


# ---------------------------------------------------------------- settings: pclab serve


def bad_settings(quick: bool) -> list[tuple[str, str]]:
    """(variable, malformed value) pairs: the issue's forms and out-of-range values."""
    numbers = ("", "abc", "1_000", "+5", "\u0661\u0662", "1e3", "-1", "9" * 5000, "nan")
    ranges = {
        "PCL_MAX_CONCURRENT_RUNS": ("0", "65", "1000000000000"),
        "PCL_MAX_WAITING_RUNS": ("257", "1000000000000"),
        "PCL_PG_TIMEOUT_S": ("1e-9", "0.5", "0", "3601"),
        "PCL_MEMORY_BUDGET_MB": ("63", "1048577"),
    }
    pairs = [(n, v) for n, extra in ranges.items() for v in (numbers + extra)]
    for switch in ("PCL_WARM_POOL", "PCL_PRELOAD", "PCL_PRELOAD_FRAMEWORKS"):
        pairs += [(switch, v) for v in ("", "maybe", "2", "\u202eon")]
    pairs += [("PCL_ROOM_DB", v) for v in ("", "/no/such/folder/rooms.db", "/tmp", "x" * 5000)]
    return pairs[::6] if quick else pairs


def serve_refuses(name: str, value: str, timeout_s: float = 60.0) -> dict:
    """`python -m pclab serve` with one malformed setting: it must exit with one line on
    stderr, never having listened on its port."""
    port = free_port()
    options = f"--server.address 127.0.0.1 --server.headless true --server.port {port}"
    cmd = [sys.executable, "-m", "pclab", "serve", *options.split()]
    env = dict(os.environ, **{name: value})
    began = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    listened = False
    while proc.poll() is None and time.monotonic() - began < timeout_s:
        with socket.socket() as s:
            listened = listened or s.connect_ex(("127.0.0.1", port)) == 0
        time.sleep(0.05)
    if proc.poll() is None:
        os.killpg(proc.pid, 9)
    lines = [ln for ln in proc.communicate()[1].splitlines() if ln.strip()]
    problems = [] if proc.returncode not in (0, None, -9) else ["it served"]
    problems += ["it listened first"] if listened else []
    problems += [] if len(lines) == 1 else [f"{len(lines)} lines on stderr"]
    problems += [f"a {len(lines[0])}-character line"] if lines and len(lines[0]) > 300 else []
    return {
        "variable": name,
        "value": value[:24],
        "exit": proc.returncode,
        "line": lines[0][:200] if lines else "",
        "problems": problems,
        "seconds": round(time.monotonic() - began, 2),
    }


def probe_settings(quick: bool) -> list[dict]:
    with ThreadPoolExecutor(max_workers=3) as pool:
        return list(pool.map(lambda pair: serve_refuses(*pair), bad_settings(quick)))


# ---------------------------------------------------------------- the whole probe


def probe(quick: bool, tabs: int = 3, limit_s: float = 4 * 3600) -> dict:
    """The settings, the faults (servers of their own), then the paths and the page loads
    against one fresh server (no load started after `limit_s` of loading)."""
    began, out = time.monotonic(), {"quick": quick, "load_start": loadavg()}
    out["settings"] = probe_settings(quick)
    out["faults"] = probe_faults.run_all(quick)
    server = Server()
    try:
        out["paths"] = probe_paths(server.url)
        out["browse"] = asyncio.run(_browse(server.url, quick, tabs, limit_s))
    finally:
        out["left_after_stop"] = server.stop()
    out["seconds"], out["load_end"] = time.monotonic() - began, loadavg()
    return out


def _row(concern: str, check: str, failures: list[str], total: int) -> list[str]:
    verdict = "pass" if not failures else "FAIL"
    detail = f"{total - len(failures)}/{total} clean" + (
        "; " + "; ".join(failures[:3])[:300] if failures else ""
    )
    return [concern, check, verdict, detail]


def rows(r: dict) -> list[list[str]]:
    """One row per finding of the issue, from a `probe` result."""
    skipped = sum(1 for x in r["browse"]["loads"] if x.get("skipped"))
    loads = [x for x in r["browse"]["loads"] if not x.get("skipped")]

    def failing(pick) -> list[str]:
        return [f"{x['page']} {x['load']}: {p}" for x in loads for p in x["problems"] if pick(p)]

    markup = failing(
        lambda p: "marker" in p or "link to" in p or "image" in p or "script" in p or "colour" in p
    )
    python = failing(lambda p: p.startswith(("Python", "a Streamlit", "no page")))
    out = [
        _row("links", "no payload rendered as markup or run as script", markup, len(loads)),
        _row("links", "no Python message, traceback or exception box", python, len(loads)),
        _row(
            "links",
            "the Run button present",
            failing(lambda p: p == "no Run button"),
            sum(x["page"] in RUN_BUTTONS for x in loads),
        ),
        _row(
            "links",
            "no format (Cf) character in the page's text",
            failing(lambda p: p.startswith("format")),
            len(loads),
        ),
        _row(
            "paths",
            f"{len(r['paths'])} path tricks: nothing from outside the app, no "
            "redirect off the host",
            [f"{x['path']}: {p}" for x in r["paths"] for p in x["problems"]],
            len(r["paths"]),
        ),
        _row(
            "settings",
            "each malformed PCL_* stops `pclab serve` with one line, unheard",
            [
                f"{x['variable']}={x['value']!r}: {', '.join(x['problems'])}"
                for x in r["settings"]
                if x["problems"]
            ],
            len(r["settings"]),
        ),
        _row(
            "hosts",
            "every request of every page load to the lab's host (seen: "
            + ", ".join(r["browse"]["hosts"])
            + ")",
            r["browse"]["foreign"],
            len(r["browse"]["hosts"]),
        ),
        _row(
            "leftovers",
            "nothing left after the probe's server stopped",
            [str(v) for v in r["left_after_stop"].values() if v],
            1,
        ),
    ]
    if skipped:
        out.append(
            [
                "links",
                "every planned page load made",
                "FAIL",
                f"{skipped} of {skipped + len(loads)} not started: the time limit ran out",
            ]
        )
    return out + probe_faults.rows(r["faults"])


def run(quick: bool = False, repeats: int | None = None) -> Section:
    """BENCHMARKS.md's section: the probe's rows, each pass or FAIL."""
    from bench import child_json

    load_start, started, began = loadavg(), now(), time.perf_counter()
    r = child_json("bench.probe", ["--quick"] if quick else [], timeout_s=5 * 3600)
    if "error" in r:
        section = Section("probe", TITLE, COLUMNS, load_start=load_start, started=started)
        section.notes.append(f"not measured: {r['error']}")
        section.seconds, section.load_end = time.perf_counter() - began, loadavg()
        return section
    return section_of(r, started)


TITLE = "The hostile-visitor probe (issue 34), repeated"
COLUMNS = ["concern", "check", "result", "detail"]


def section_of(r: dict, started: str) -> Section:
    """The section of one `probe` result: its rows, one goal, the figures as notes."""
    section = Section("probe", TITLE, COLUMNS, rows=rows(r), started=started)
    section.load_start, section.load_end = tuple(r["load_start"]), tuple(r["load_end"])
    section.seconds = r["seconds"]
    failed = [row for row in section.rows if row[2] != "pass"]
    passed = f"{len(section.rows) - len(failed)}/{len(section.rows)} rows pass"
    section.goals.append(Goal("every finding of the issue's probe gone", passed, "all", not failed))
    made = [x for x in r["browse"]["loads"] if not x.get("skipped")]
    section.notes.append(
        f"{len(made)} page loads, {len(r['paths'])} path tricks, {len(r['settings'])} malformed "
        f"settings, {'quick' if r['quick'] else 'full'} mode, in {duration(r['seconds'])}; the "
        "deep-link parameters found on each page: "
        + "; ".join(f"{u} {len(k)}" for u, k in r["browse"]["keys"].items())
        + ". Format characters a page shows without any link (Streamlit's and KaTeX's own) "
        + f"are not counted: {json.dumps(r['browse'].get('own_format_chars', {}))}."
    )
    section.notes += probe_faults.notes(r["faults"])
    section.data = {k: r[k] for k in ("quick", "seconds", "load_start", "load_end", "faults")}
    section.data["keys"] = r["browse"]["keys"]
    return section


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few payloads: ~3 minutes")
    parser.add_argument("--tabs", type=int, default=3, help="page loads at once")
    parser.add_argument("--rows", action="store_true", help="also print the rows")
    parser.add_argument(
        "--limit-min", type=float, default=240.0, help="start no page load after this"
    )
    parser.add_argument("--out", default=None, help="also write its section into this file")
    args = parser.parse_args()
    started = now()
    out = probe(args.quick, args.tabs, args.limit_min * 60)
    if args.rows:
        for row in rows(out):
            print(" | ".join(row), file=sys.stderr)
    if args.out:
        command = "python -m bench.probe " + " ".join(sys.argv[1:])
        report.write([section_of(out, started)], Path(args.out), command)
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
