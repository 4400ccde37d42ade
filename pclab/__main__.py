"""`python -m pclab ...` is the `pclab` command."""

import sys

from pclab.cli import main

sys.exit(main())
