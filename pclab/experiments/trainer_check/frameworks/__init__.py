"""Frameworks, measured: the trainer check run on each bundled framework adapter
(examples/frameworks/<framework>/<code>.py; P = 2, K = 2), one record per framework setting,
keyed by the setting's code and written with the versions that ran it to
pclab/artifacts/framework_checks.json. A coupled adapter (a loss over in-batch negatives:
OpenCLIP at K = 1, sentence-transformers) is recorded with the objective its step minimised,
that objective's factor (one per parameter group where they differ) and residual, and each
scenario's scheme. A setting that cannot run here keeps a record too, with the exact reason
instead of a measurement.

    python -m pclab.experiments.trainer_check.frameworks                 # every installed one
    python -m pclab.experiments.trainer_check.frameworks --only fsdp2_local_mean,hf_trainer
    python -m pclab.experiments.trainer_check.frameworks --only lightning   # a package's rows
    python -m pclab.experiments.trainer_check.frameworks --readme   # rewrite the tables only

Split by job: `setting` (what a row is, its adapter's folder, the shared constants), `table`
(the rows), `recorder` (running the checks and writing records), `loader` (reading them),
`readme_table` (README.md's table and examples/README.md, rendered from the record). The ranks
run under the Python that runs the command, so a framework that cannot share the lab's
environment is recorded from its own virtual environment with `--only`: the other records
stay as they were. A setting whose package is not installed keeps its last record (from a
real run elsewhere), or gets one saying it is not installed.
"""

from pclab.experiments.trainer_check.frameworks.loader import (
    RECORDED,
    also_label,
    by_code,
    load,
    setting_of,
    version_label,
)
from pclab.experiments.trainer_check.frameworks.recorder import (
    check_adapters,
    chosen,
    command,
    measured,
    not_run,
    record,
)
from pclab.experiments.trainer_check.frameworks.setting import (
    ACCUM,
    FOLDERS,
    MEASURED_COUPLED,
    MEASURED_SCENARIO,
    NO_DEPS,
    PRELOAD,
    SHARED,
    SHARED_MODULES,
    WORLD_SIZE,
    Setting,
    installed_version,
    preload_modules,
)
from pclab.experiments.trainer_check.frameworks.table import ADAPTERS, BY_CODE, CODES, SETTINGS

__all__ = [
    "ACCUM",
    "ADAPTERS",
    "BY_CODE",
    "CODES",
    "FOLDERS",
    "MEASURED_COUPLED",
    "MEASURED_SCENARIO",
    "NO_DEPS",
    "PRELOAD",
    "RECORDED",
    "SETTINGS",
    "SHARED",
    "SHARED_MODULES",
    "WORLD_SIZE",
    "Setting",
    "also_label",
    "by_code",
    "check_adapters",
    "chosen",
    "command",
    "installed_version",
    "load",
    "measured",
    "not_run",
    "preload_modules",
    "record",
    "setting_of",
    "version_label",
]
