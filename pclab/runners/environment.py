"""The environment every process the lab starts gets, whether torchrun's or the warm pool's.

python -c "from pclab.runners import environment; print(environment.child_environment())"
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pclab.paths import IMPORT_ROOT


def child_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment, plus: one intra-op thread (P processes share a small CPU;
    threads would fight), this copy of the package first on PYTHONPATH (a checkout beside an
    installed wheel must not mix the two), unbuffered output (a rank's last words reach its
    log), then `extra`."""
    env = dict(os.environ)
    path = os.pathsep.join(p for p in (str(IMPORT_ROOT), env.get("PYTHONPATH", "")) if p)
    env.update({"OMP_NUM_THREADS": "1", "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"})
    env.update(extra or {})
    return env
