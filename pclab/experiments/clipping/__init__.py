"""The coordinated, clipped step run for real: two Gloo processes, one fixed order of reductions.

Both ranks hold the seed's layout (core.clipping.SCENARIOS["seed_replicated"]): rank 0 owns
shard w0 (g = 3), rank 1 owns shard w1 (g = 4), and both hold the replicated `shared` (g = 12,
owned by rank 0), all multiplied by the loss scale 8. Each scenario is one update, in the same
order on every rank:

    01 unscale  grad /= scale; flag any non-finite gradient this rank holds
    02 agree    all_reduce MAX of [flag, max |g| over owned]      -> skip, m
    03 reduce   all_reduce SUM of sum_owned (g/m)^2                -> n = m sqrt(.)
                (issued even when skipping, so the collectives never fall out of step)
    --          all_reduce MAX of [skip, c, -c]: every rank checks it holds the shared decision
    04 update   grad *= c; SGD(lr 0.1, momentum 0.9) steps, or nothing changes at all

once with every gradient finite and, with --inject-overflow R, once with rank R's shard
overwritten by inf (or nan). Every rank also computes two references on the same gradients:
a single-process model holding every independent parameter once, driven by
torch.amp.GradScaler + torch.nn.utils.clip_grad_norm_, and the same model sharded with FSDP2
(`fully_shard` over a CPU device mesh), clipped by clip_grad_norm_ on its DTensor gradients.
torch's clip_grad_norm_ divides by (n + 1e-6); the comparison allows exactly that much.

    pclab run clipping --json [options]      # `pclab run clipping --help` lists them
    torchrun --standalone --nproc-per-node 2 -m pclab.experiments.clipping --out-dir /tmp/clip \
        --inject-overflow 1
"""

from __future__ import annotations

from pclab.experiments.base import Experiment
from pclab.experiments.clipping.params import Params
from pclab.experiments.clipping.report import agrees, build_report

EXPERIMENT = Experiment(
    name="clipping",
    worker="pclab.experiments.clipping",
    params=Params.checked,
    build_report=build_report,
    agrees=agrees,
    timeout_s=180.0,
)


run = EXPERIMENT.launch  # raw parameters in: validated, then run (notebooks, tests)
