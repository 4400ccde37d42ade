"""The recorded framework table, read: pclab/artifacts/framework_checks.json, one record per
setting, each keyed by its setting's code (`code`), so a setting's words may change freely.

    python -c "from pclab.experiments.trainer_check import frameworks; print(frameworks.by_code())"
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pclab.experiments.trainer_check.frameworks.setting import Setting
from pclab.experiments.trainer_check.frameworks.table import BY_CODE
from pclab.paths import PACKAGE_DIR

RECORDED = PACKAGE_DIR / "artifacts" / "framework_checks.json"


def load(path: Path = RECORDED) -> dict[str, Any]:
    """{"about", "records": [...]} as recorded, in the table's order, or no records when there
    is no file."""
    if not path.is_file():
        return {"records": []}
    recorded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return recorded


def version_label(record: dict[str, Any]) -> str:
    """The versions a record was made with, each named by its package ("deepspeed 0.19.8 +
    transformers 5.24.0": a row that drives transformers through DeepSpeed records both), or
    "—" for none."""
    if record["version"] is None:
        return "—"
    return f"{record['package']} {record['version']}{also_label(record)}"


def also_label(record: dict[str, Any]) -> str:
    """ " + transformers 5.24.0" for each other package the record's adapter drives, or ""."""
    return "".join(f" + {package} {v}" for package, v in (record.get("also") or {}).items())


def by_code(path: Path = RECORDED) -> dict[str, dict[str, Any]]:
    """code -> its record."""
    return {r["code"]: r for r in load(path)["records"]}


def setting_of(record: dict[str, Any]) -> Setting:
    """The SETTINGS entry a record was made for, by its code (ValueError for a code the table
    no longer has)."""
    code = record.get("code")
    if code not in BY_CODE:
        raise ValueError(
            f"code={code!r}: no such setting in the table; one of {', '.join(BY_CODE)}"
        )
    return BY_CODE[code]
