"""Does a framework row's first Run on this server compile an op before the check can start?
Measured, not assumed: the op's shared library is looked for where torch.utils.cpp_extension
builds it (TORCH_EXTENSIONS_DIR, else the user cache's torch_extensions/py311_cpu and the
like). DeepSpeed's CPU shared-memory op took 2.5 min to compile here, 294 s beside a busy core,
before the first DeepSpeed check began; later runs load it from that cache.

Nothing here imports torch or the framework: the page asks on every render.

    python -c "from pclab.ui import first_run; print(first_run.to_compile('deepspeed'))"
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

COMPILES = {"deepspeed": ("deepspeed_shm_comm",)}  # package -> the ops its first run builds


def extensions_root() -> Path:
    """The folder torch builds its extensions under (before the per-Python build folder)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "torch_extensions"


def built(name: str) -> bool:
    """Whether op `name` is compiled for this Python (its `<name>.so` in torch's build folder:
    TORCH_EXTENSIONS_DIR/<name>, else <root>/py<version>_<accelerator>/<name>)."""
    chosen = os.environ.get("TORCH_EXTENSIONS_DIR")
    if chosen:
        return (Path(chosen) / name / f"{name}.so").is_file()
    python = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}"
    return any(extensions_root().glob(f"{python}_*/{name}/{name}.so"))


def to_compile(package: str) -> tuple[str, ...]:
    """The ops `package`'s first run here would compile (empty: none, or all cached)."""
    return tuple(name for name in COMPILES.get(package, ()) if not built(name))
