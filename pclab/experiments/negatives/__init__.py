"""InfoNCE with gathered negatives, run for real: P processes, shared encoder scalars, DDP.

Rank r owns one pair (a_r, b_r) and encodes it with two scalars shared by every rank,
q_r = wq a_r and d_r = wd b_r, held in a DistributedDataParallel-wrapped module. Each
query's own document is its positive; similarity is the un-normalised product over tau:

    s_ij = q_i d_j / tau,   L_i = logsumexp_j s_ij - s_ii,   L = (1/P) sum_i L_i.

One launch runs every scheme of `SCHEMES` (how a rank sees the other ranks' documents):
    gather               differentiable all-gather; its backward sums every rank's part
                         into the document's owner                (rank loss L_r)
    detach               remote documents detached                (rank loss L_r)
    local                candidates are only the rank's own pair  (rank loss 0)
    full_loss_each_rank  every rank computes L with its own features re-inserted
then DDP's mean and one SGD step (lr 0.1). Rank 0 also computes the single-process
reference: plain autograd on the whole batch, d L / d(wq, wd).

    pclab run negatives --json [options]     # `pclab run negatives --help` lists them
    torchrun --standalone --nproc-per-node 4 -m pclab.experiments.negatives --out-dir /tmp/neg
"""

from __future__ import annotations

from pclab.experiments.base import Experiment
from pclab.experiments.negatives.params import Params
from pclab.experiments.negatives.report import agrees, build_report

EXPERIMENT = Experiment(
    name="negatives",
    worker="pclab.experiments.negatives",
    params=Params.checked,
    build_report=build_report,
    agrees=agrees,
    timeout_s=120.0,
)


run = EXPERIMENT.launch  # raw parameters in: validated, then run (notebooks, tests)
