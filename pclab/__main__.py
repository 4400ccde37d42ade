"""`python -m pclab ...` is the `pclab` command."""

from pclab.cli import console

console()
