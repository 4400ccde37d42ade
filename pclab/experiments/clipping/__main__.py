"""A rank under torchrun runs the worker; anything else is the command line."""

import os
import sys

if "RANK" in os.environ:  # started by torchrun (or the warm pool): this process is one rank
    from pclab.experiments.clipping import worker

    worker.main()
else:
    from pclab.experiments.clipping import cli

    sys.exit(cli.main())
