"""The `pclab` command: check a trainer file, or run one of the lab's experiments.

    pclab check TRAINER.py [--world-size P] [--accum K] [--counts "3,8;8,16"] [--json]
    pclab run EXPERIMENT [its options] [--json]      # EXPERIMENT from the registry
    pclab run EXPERIMENT --help                      # an experiment's own options
    pclab serve [streamlit run's options]            # check the PCL_* settings, then serve
    python -m pclab ...                              # the same command

`pclab serve` refuses a malformed PCL_* setting before anything listens (a bare `streamlit run
app.py` reads them at the first page view: its health check says "ok" until then), removes
what a killed server left in $TMPDIR (runners.scratch), then runs `streamlit run app.py` in
the checkout (its .streamlit/config.toml applies) with the rest of its arguments, in this
same process (a host's signals reach it), warming the lab as the server starts: the runtime,
the warm pool's first zygote and what a first press needs (ui.warm_start), so the first
visitor's first press does not wait for them.

Exit codes (every subcommand): 0 ok, 1 a failed run or check, 2 a bad argument or file.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import sys
from typing import NoReturn

from pclab import __version__
from pclab.experiments import registry
from pclab.paths import CHECKOUT
from pclab.runners import scratch
from pclab.runners.settings import Settings

CHECK = "trainer_check"  # `pclab check` is `pclab run trainer_check`


def usage() -> str:
    experiments = ", ".join(registry.names())
    return (
        f"usage: pclab check TRAINER.py [options] | pclab run EXPERIMENT [options]\n\n"
        f"  check      is your training step the same update as the single-process one?\n"
        f"  run        one of the lab's experiments on real processes: {experiments}\n"
        f"  serve      check the PCL_* settings, then `streamlit run app.py` with the rest\n"
        f"  --version  the lab's version\n\n"
        f"`pclab check --help` and `pclab run EXPERIMENT --help` list the options."
    )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else 2
    if args[0] == "--version":
        print(f"pclab {__version__}")
        return 0
    command, rest = args[0], args[1:]
    if command == "check":
        return registry.cli(CHECK)(rest)
    if command == "serve":
        return serve(rest)
    if command == "run":
        if not rest or rest[0] in ("-h", "--help"):
            print(usage())
            return 0 if rest else 2
        if rest[0] not in registry.names():
            known = ", ".join(registry.names())
            print(
                f"pclab run: error: unknown experiment {rest[0]!r}: one of {known}", file=sys.stderr
            )
            return 2
        return registry.cli(rest[0])(rest[1:])
    print(
        f"pclab: error: unknown command {command!r}: check, run or serve (see pclab --help)",
        file=sys.stderr,
    )
    return 2


def serve(streamlit_args: list[str]) -> int:
    """Check the PCL_* settings and the checkout, remove a killed server's folders, then run
    `streamlit run app.py *streamlit_args` here, warmed as it starts (ui.warm_start); returns
    2 (one line on stderr) when it cannot start, else Streamlit's exit status."""
    try:
        Settings.from_env(os.environ)
    except ValueError as error:
        print(f"pclab serve: error: {error}", file=sys.stderr)
        return 2
    if CHECKOUT is None:
        print(
            "pclab serve: error: the app (app.py) ships with a checkout, not a wheel",
            file=sys.stderr,
        )
        return 2
    if importlib.util.find_spec("streamlit") is None:
        print(
            "pclab serve: error: Streamlit is not installed (pip install -r requirements.txt)",
            file=sys.stderr,
        )
        return 2
    scratch.remove_stale()
    os.chdir(CHECKOUT)  # where Streamlit reads the lab's .streamlit/config.toml
    from streamlit.web import cli as streamlit_cli

    from pclab.ui import warm_start

    warm_start.when_serving()
    sys.argv = ["streamlit", "run", "app.py", *streamlit_args]  # as `streamlit run` sees it
    try:
        streamlit_cli.main(prog_name="streamlit")
    except SystemExit as done:  # click ends every command this way
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 2)
    return 0


def console() -> NoReturn:
    """The `pclab` console script and `python -m pclab`: `main()`, then exit without the
    interpreter's teardown.

    `pclab check` has imported torch in this process (the trainer file, checked before any
    launch), and tearing torch down takes 0.5-1 s after the verdict is printed: as long as
    some of the runs it follows. The exit handlers still run (a runtime's shutdown, the
    scratch folders: atexit) and both streams are flushed; only the module teardown is
    skipped, as a rank skips it (runners.worker.finish_worker). Ctrl-C ends it with one line
    and exit code 130 (the run it followed stopped, its processes ended); any other exception
    ends the process the usual way, with its traceback."""
    try:
        code = main()
    except KeyboardInterrupt:
        print("pclab: stopped (Ctrl-C)", file=sys.stderr)
        code = 130
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
