"""Where the lab's files are: the package, the folder it is imported from, and the checkout.

    python -c "from pclab import paths; print(paths.PACKAGE_DIR, paths.CHECKOUT)"

The package carries its data (locales/, artifacts/, corpus/). A git checkout also has the
examples (trainers and framework adapters), the tests and the benchmarks beside the
package; an installed wheel has none of them, and `CHECKOUT` is then None.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
# What a rank puts first on PYTHONPATH so it imports this very copy of the package (a
# checkout beside an installed wheel must not mix the two).
IMPORT_ROOT = PACKAGE_DIR.parent
CHECKOUT: Path | None = IMPORT_ROOT if (IMPORT_ROOT / "app.py").is_file() else None
# A checkout's bundled examples (absent from a wheel), indexed in examples/README.md: the
# contract by example in trainers/, framework adapters in frameworks/<framework>/.
EXAMPLES_ROOT = IMPORT_ROOT / "examples"
EXAMPLES_DIR = EXAMPLES_ROOT / "trainers"
FRAMEWORK_EXAMPLES_DIR = EXAMPLES_ROOT / "frameworks"


def shown(path: Path | str) -> str:
    """`path` as a user may see it: relative to the checkout (or the package) when inside it,
    so a run record or a download never carries the server's absolute folders."""
    resolved = Path(path).resolve()
    for base in (CHECKOUT, PACKAGE_DIR):
        if base is not None and resolved.is_relative_to(base):
            return str(resolved.relative_to(base))
    return Path(path).name
