"""The full-Transformer experiment: is one update still the same update, split in time or space?

Every branch starts from the committed step-800 weights of the lab's 298,176-parameter
Transformer (experiments/transformer/lm) and makes ONE update on the same four 96-token
windows, of which the user labels the final n_w positions (N = sum n_w; padding never
counts). See experiments/transformer/lm/branches.py for the branches: the full-batch
reference, accumulation normalised
by the global N, microbatch means weighted equally, DDP's mean of local means, and the
P / N coefficient (core.ledger.local_loss_scale). Each runs with SGD (fresh state) and AdamW
(the restored step-800 state) and is compared with its own optimizer's reference at 2e-10.

One launch (torchrun, or the server's warm pool) runs all branches for the chosen labels,
the same for the equal-count control (the wrong rules pass when every microbatch and rank
holds the same count), and the N = 0 case: a coordinated skip against a naive zero-loss
step. Every rank runs the DDP branches and makes and reports every update; each
single-process branch's gradient is computed on one rank and broadcast to the others, and
each branch's gradient is stepped by both optimizers (experiments/transformer/worker.py).

    pclab run transformer --json [options]   # `pclab run transformer --help` lists them
    torchrun --standalone --nproc-per-node 2 -m pclab.experiments.transformer --out-dir /tmp/tf

Exit codes: 0 ok, 1 failed run (one line on stderr), 2 bad arguments (one line on stderr).
"""

from __future__ import annotations

from pclab.experiments.base import Experiment
from pclab.experiments.transformer.params import Params
from pclab.experiments.transformer.report import agrees, build_report

EXPERIMENT = Experiment(
    name="transformer",
    worker="pclab.experiments.transformer",
    params=Params.checked,
    build_report=build_report,
    agrees=agrees,
    timeout_s=240.0,
)


run = EXPERIMENT.launch  # raw parameters in: validated, then run (notebooks, tests)
