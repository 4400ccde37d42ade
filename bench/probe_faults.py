"""The probe's faults (bench/probe.py): processes killed during a run, and a refused Run
admitted again.

kills    a rank or the zygote (warm pool), SIGKILL or SIGTERM, while a Transformer run holds
         them: the page answers (a failed run, no exception box), the run's folder goes, and
         the next Run gives its result. The server, SIGKILL or SIGTERM, during the bundled HF
         Trainer check at P = 4, K = 3 (whose ranks make `pcl-hf-trainer-*` folders): the next
         server on the same TMPDIR leaves no folder of a dead owner once it has started, and
         its Run gives its result.
refusal  a server that holds one run and lets none wait (PCL_MAX_CONCURRENT_RUNS=1,
         PCL_MAX_WAITING_RUNS=0); three tabs press Run at once, so two are refused; each then
         presses again 0.25 s after its answer shows, until admitted. Measured: from the
         first refusal to the first admitted press, and from that tab's last refusal to it.

    python -m bench.probe_faults [--quick]     # JSON
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

from bench import exit_on_sigterm, loadavg
from bench.cold_start import CHROMIUM, CHROMIUM_ARGS
from bench.hosted import ANSWERS, Server, _prefix
from bench.report import duration
from pclab.runners import memory, scratch
from pclab.runners.zygote import waiting_spares

HF_CHECK = "check-trainer?chk_example=hf_trainer&chk_world_size=4&chk_accum=3"
EXPERIMENT = "experiment?exp_labels0={}"
BUTTONS = {"check-trainer": "check.run.button", "experiment": "experiment.run.button"}
STATE = "() => document.querySelector('[data-testid=stApp]')?.dataset.testScriptState"
SHOWN = """() => [...document.querySelectorAll('[data-testid="stExpander"] summary,'
    + ' [data-testid="stAlert"], [data-testid="stCaptionContainer"]')].map(e => e.textContent)"""
# A page may show several: a refused run's line reads "Did not finish" above the busy warning.
ORDER = ("result", "stored", "busy_memory", "busy", "failed")


def _answer(tab) -> str:
    """The run's answer the settled page shows: the first of ORDER, 'exception', or 'none'."""
    if tab.locator('[data-testid="stException"]').count():
        return "exception"
    shown = tab.evaluate(SHOWN)
    return next((k for k in ORDER if any(ANSWERS[k] in s for s in shown)), "none")


def open_page(browser, url: str, path: str):
    tab = browser.new_page(viewport={"width": 1400, "height": 1000}, locale="en-US")
    tab.set_default_timeout(240_000)
    tab.goto(f"{url}/{path}")
    tab.wait_for_selector('[data-testid="stAppViewContainer"] h1')
    tab.wait_for_function(f"() => ({STATE})() === 'notRunning'")
    return tab


def click(tab, path: str) -> float:
    """Press the page's Run button; the monotonic time of the press."""
    tab.get_by_role("button", name=_prefix(BUTTONS[path.split("?")[0]])).click()
    return time.monotonic()


def click_run(tab, path: str) -> float:
    """Press the page's Run button and return the monotonic time of the press; the script
    has started its rerun when this returns (or finished it within a second)."""
    pressed = click(tab, path)
    try:
        tab.wait_for_function(f"() => ({STATE})() !== 'notRunning'", timeout=1000, polling=10)
    except Exception:  # noqa: BLE001 - a fast rerun may be over before the first poll
        pass
    return pressed


def settled_answer(tab) -> tuple[str, float]:
    tab.wait_for_function(f"() => ({STATE})() === 'notRunning'", polling=20)
    return _answer(tab), time.monotonic()


def warm(browser, server: Server, timeout_s: float = 240.0) -> bool:
    """Open the home page (the server starts its pool on its first script run) in this
    browser; True once a zygote has forked its spares (Server.wait_for_pool, in our browser)."""
    open_page(browser, server.url, "").close()
    return bool(wait_for(lambda: any(waiting_spares(z) for z in server.zygotes()), timeout_s, 0.2))


def ranks(server: Server) -> list[int]:
    """The server's processes whose stdout is a rank log in a run's folder."""
    found = []
    for pid in server.descendants():
        try:
            target = os.readlink(f"/proc/{pid}/fd/1")
        except OSError:
            continue
        if "pcl-run-" in target and target.endswith("stdout.log"):
            found.append(pid)
    return found


def wait_for(condition, timeout_s: float, step_s: float = 0.02):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(step_s)
    return None


def victim(server: Server, target: str) -> int | None:
    """The process to kill once a run holds its ranks: a rank, its zygote, or the server."""
    held = wait_for(lambda: ranks(server), 240)
    if not held or target == "rank":
        return held[0] if held else None
    if target == "zygote":
        return next((z for z in server.zygotes() if held[0] in memory.descendants(z)), None)
    return server.proc.pid


def dead_owners(tmp: Path) -> list[str]:
    """`pcl-*` folders in `tmp` whose owner process is gone."""
    names = [p.name for p in tmp.iterdir() if p.name.startswith("pcl-")]
    return [n for n in names if (o := scratch.owner(n)) is not None and not _alive(o)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def kill_in_pool(browser, server: Server, target: str, sig: int, labels: int) -> dict:
    """Kill a rank or the zygote during a Transformer run; the answer, then the next Run."""
    path = EXPERIMENT.format(labels)
    tab = open_page(browser, server.url, path)
    click_run(tab, path)
    pid = victim(server, target)
    out: dict = {"target": target, "signal": signal.Signals(sig).name, "killed": pid}
    if pid is None:
        return {**out, "problems": [f"no {target} seen during the run"]}
    killed_at = time.monotonic()
    os.kill(pid, sig)
    out["answer"], answered_at = settled_answer(tab)
    out["answer_s"] = answered_at - killed_at
    out["run_folders"] = wait_for(lambda: not list(server.tmp.glob("pcl-run-*")), 30) or sorted(
        p.name for p in server.tmp.glob("pcl-run-*")
    )
    tab.close()
    tab = open_page(browser, server.url, path)
    click_run(tab, path)
    out["next"] = settled_answer(tab)[0]
    tab.close()
    return {**out, "problems": _problems(out)}


def kill_server(browser, sig: int) -> dict:
    """Kill the server during the HF Trainer check; the next start's folders and Run."""
    first = Server()
    out: dict = {"target": "server", "signal": signal.Signals(sig).name}
    try:
        warm(browser, first)
        tab = open_page(browser, first.url, HF_CHECK)
        click_run(tab, HF_CHECK)
        wait_for(lambda: list(first.tmp.rglob("pcl-hf-trainer-*")), 240, 0.2)
        out["killed"] = victim(first, "server")
        os.kill(first.proc.pid, sig)
        first.proc.wait(timeout=30)
        tab.close()
        time.sleep(1.0)  # the zygote and ranks follow their parent (PR_SET_PDEATHSIG)
        out["left_by_it"] = sorted(p.name for p in first.tmp.iterdir())
        second = Server({"TMPDIR": str(first.tmp)})
        try:
            warm(browser, second)
            out["dead_owners_after_start"] = dead_owners(first.tmp)
            tab = open_page(browser, second.url, HF_CHECK)
            click_run(tab, HF_CHECK)
            out["next"] = settled_answer(tab)[0]
            tab.close()
        finally:
            second.stop()
    finally:
        first.stop()
    return {**out, "problems": _problems(out)}


def _problems(out: dict) -> list[str]:
    problems = []
    if out.get("answer") not in (None, "failed"):
        problems.append(f"the killed run's page shows {out['answer']}")
    if out.get("run_folders") not in (None, True):
        problems.append(f"run folders left: {out['run_folders']}")
    if out.get("dead_owners_after_start"):
        problems.append(
            f"a dead owner's folders after the next start: {out['dead_owners_after_start']}"
        )
    if out.get("next") not in ("result", "stored"):
        problems.append(f"the next Run: {out.get('next')}")
    return problems


def kills(quick: bool) -> list[dict]:
    from playwright.sync_api import sync_playwright

    plan = (
        [("rank", signal.SIGKILL)]
        if quick
        else [(t, s) for t in ("rank", "zygote") for s in (signal.SIGKILL, signal.SIGTERM)]
    )
    results = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        server = Server()
        try:
            warm(browser, server)
            for i, (target, sig) in enumerate(plan):
                results.append(_guarded(kill_in_pool, browser, server, target, sig, 21 + i))
        finally:
            server.stop()
        for sig in (signal.SIGKILL,) if quick else (signal.SIGKILL, signal.SIGTERM):
            results.append(_guarded(kill_server, browser, sig))
        browser.close()
    return results


def _guarded(function, *args) -> dict:
    try:
        return function(*args)
    except Exception as exc:  # noqa: BLE001 - a scenario that breaks is a finding
        return {"target": function.__name__, "problems": [str(exc).splitlines()[0][:200]]}


# ---------------------------------------------------------------- a refused Run, admitted again


def refusal(tabs: int = 3, retry_s: float = 0.25) -> dict:
    """Seconds from the first refusal to the first admitted press (and from that tab's last
    refusal to it); the refused tabs press again whenever their answer shows."""
    from playwright.sync_api import sync_playwright

    server = Server({"PCL_MAX_CONCURRENT_RUNS": "1", "PCL_MAX_WAITING_RUNS": "0"})
    out: dict = {"load_start": loadavg()}
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            out["pool_ready"] = warm(browser, server)
            paths = [EXPERIMENT.format(31 + i) for i in range(tabs)]
            pages = [open_page(browser, server.url, p) for p in paths]
            out.update(_race(pages, paths, retry_s))
            browser.close()
    finally:
        out["left_after_stop"] = server.stop()
    out["load_end"] = loadavg()
    return out


def _race(pages, paths, retry_s: float, limit_s: float = 300.0) -> dict:
    """Every tab presses; each refused tab presses again until admitted. Answers are read
    in turn (a tab's rerun ends while another's is read: only the order of events counts)."""
    pending = {i: click(tab, p) for i, (tab, p) in enumerate(zip(pages, paths))}
    time.sleep(1.0)  # every rerun under way before any answer is read
    refused_at, admitted, presses, seen_kinds, last_busy = None, [], 0, [], {}
    deadline = time.monotonic() + limit_s
    while pending and time.monotonic() < deadline:
        for i, pressed in list(pending.items()):
            state = pages[i].evaluate(STATE)
            if state != "notRunning":
                continue
            kind, seen = _answer(pages[i]), time.monotonic()
            seen_kinds.append(f"{i}:{kind}")
            if kind in ("busy", "busy_memory"):
                refused_at, last_busy[i] = refused_at or seen, seen
                time.sleep(retry_s)
                pending[i], presses = click_run(pages[i], paths[i]), presses + 1
                continue
            del pending[i]
            if i in last_busy:  # refused before, admitted now
                admitted.append({"pressed": pressed, "kind": kind, "after": last_busy[i]})
        time.sleep(0.02)
    first = min(admitted, key=lambda a: a["pressed"], default=None)
    return {
        "refused": refused_at is not None,
        "admitted": [a["kind"] for a in admitted],
        "retries": presses,
        "answers": seen_kinds[:40],
        "refusal_to_admitted_s": None if first is None else first["pressed"] - refused_at,
        "last_refusal_to_admitted_s": None if first is None else first["pressed"] - first["after"],
        "unanswered": len(pending),
    }


def run_all(quick: bool) -> dict:
    return {"kills": kills(quick), "refusal": _guarded(refusal)}


def rows(faults: dict) -> list[list[str]]:
    out = []
    for k in faults["kills"]:
        what = f"{k.get('signal', '?')} of the {k['target']} during a run"
        detail = (
            f"answer {k.get('answer', '—')} ({duration(k.get('answer_s'))} after the kill), "
            f"left by it {k.get('left_by_it', '—')}, next Run {k.get('next', '—')}"
            if not k["problems"]
            else "; ".join(k["problems"])
        )
        out.append(["faults", what, "pass" if not k["problems"] else "FAIL", detail])
    r = faults["refusal"]
    ok = bool(r.get("refused")) and r.get("refusal_to_admitted_s") is not None
    ok = ok and not r.get("unanswered") and set(r.get("admitted", [])) <= {"result", "stored"}
    detail = (
        f"refused, then admitted {duration(r.get('refusal_to_admitted_s'))} after the first "
        f"refusal, {duration(r.get('last_refusal_to_admitted_s'))} after its last"
        if ok
        else json.dumps(r)[:300]
    )
    out.append(["faults", "a refused Run is admitted again", "pass" if ok else "FAIL", detail])
    return out


def notes(faults: dict) -> list[str]:
    r = faults["refusal"]
    return [
        "Refusal: PCL_MAX_CONCURRENT_RUNS=1, PCL_MAX_WAITING_RUNS=0, three tabs press Run on the "
        f"Transformer at once; {r.get('retries', '—')} presses again by the refused tabs, each "
        "0.25 s after its answer showed. From the first refusal to the first admitted press: "
        f"{duration(r.get('refusal_to_admitted_s'))}; from that tab's last refusal to it: "
        f"{duration(r.get('last_refusal_to_admitted_s'))}."
    ]


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=("kills", "refusal"), default=None)
    args = parser.parse_args()
    if args.only == "refusal":
        out = {"refusal": refusal()}
    elif args.only == "kills":
        out = {"kills": kills(args.quick)}
    else:
        out = run_all(args.quick)
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
