"""The Hugging Face Trainer, measured: the trainer check's reports on the two bundled settings
(examples/frameworks/hf_trainer/hf_trainer.py, average_tokens_across_devices=True, and
hf_trainer_local_average.py, False; P = 2, K = 2), recorded from real runs with the versions
that made them. The page "Check a trainer" shows them side by side without importing
transformers in the server (it reads the installed version with importlib.metadata).

    python -m pclab.experiments.trainer_check.hf_recorded   # run both checks, rewrite the file
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any

# re-exported: the check page reads the installed transformers through this module
from pclab.experiments.trainer_check.frameworks.setting import (
    installed_version as installed_version,
)
from pclab.paths import PACKAGE_DIR, shown

RECORDED = PACKAGE_DIR / "artifacts" / "hf_trainer_check.json"
SETTINGS = {  # example (file stem) -> its average_tokens_across_devices
    "hf_trainer": True,
    "hf_trainer_local_average": False,
}
SHAPE = {"world_size": 2, "accum": 2}
PACKAGES = ("transformers", "accelerate", "torch")


def load(path: Path = RECORDED) -> dict[str, Any]:
    """{"about", "recorded", "versions", "checks": {example: the check's JSON}}."""
    recorded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return recorded


def record(path: Path = RECORDED) -> dict[str, Any]:
    """Run the check on each setting (one launch each, as `pclab check FILE`
    would) and write what it measured, with the installed versions."""
    from pclab.experiments.trainer_check import EXPERIMENT, examples
    from pclab.experiments.trainer_check.params import Params

    checks: dict[str, dict[str, Any]] = {}
    for example in SETTINGS:
        trainer = examples.path_of(example)
        result = EXPERIMENT.run(Params.checked(str(trainer), **SHAPE))
        if not result.ok:
            raise RuntimeError(f"{example}: the check did not finish: {result.message}")
        check = result.report["checks"][0]
        checks[example] = check | {"trainer": shown(trainer)}
    payload = {
        "about": "What `pclab check examples/frameworks/hf_trainer/<example>.py --json` printed "
        "(P = 2, K = 2), recorded by `python -m pclab.experiments.trainer_check.hf_recorded`.",
        "recorded": datetime.date.today().isoformat(),
        "versions": {p: installed_version(p) for p in PACKAGES},
        "checks": checks,
    }
    path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return payload


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pclab.experiments.trainer_check.hf_recorded")
    parser.parse_args(argv)
    payload = record()
    for example, check in payload["checks"].items():
        schemes = ", ".join(f"{s['name']}: {s['scheme']}" for s in check["scenarios"])
        print(f"{example}: passed={check['passed']} ({schemes})")
    versions = ", ".join(f"{p} {v}" for p, v in payload["versions"].items())
    print(f"wrote {shown(RECORDED)} ({versions})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
