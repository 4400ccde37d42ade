"""The framework table's contrastive rows: OpenCLIP's ClipLoss and sentence-transformers'
in-batch-negatives losses, checked in the coupled mode (table.py puts them after the
language-model frameworks)."""

from __future__ import annotations

from pclab.experiments.trainer_check.frameworks.setting import Setting

OPENCLIP, SBERT = "OpenCLIP ClipLoss", "sentence-transformers"  # SBERT: its package's name too
OPENCLIP_ACCUM = 1  # ClipLoss has no accumulation (open_clip_train's accum_freq: its train.py)

CONTRASTIVE = (
    Setting(
        "openclip_global_loss",  # pip install --no-deps -r requirements-nodeps.txt (NO_DEPS)
        OPENCLIP,
        "open-clip-torch",
        "local_loss=False, gather_with_grad=False, learnable logit_scale, DDP",
        True,
        accum=OPENCLIP_ACCUM,
    ),
    Setting(
        "openclip_global_gather_grad",
        OPENCLIP,
        "open-clip-torch",
        "local_loss=False, gather_with_grad=True",
        False,
        accum=OPENCLIP_ACCUM,
    ),
    Setting(
        "openclip_local_loss",
        OPENCLIP,
        "open-clip-torch",
        "local_loss=True, gather_with_grad=False",
        False,
        accum=OPENCLIP_ACCUM,
    ),
    Setting(
        "openclip_local_gather_grad",
        OPENCLIP,
        "open-clip-torch",
        "local_loss=True, gather_with_grad=True",
        False,
        accum=OPENCLIP_ACCUM,
    ),
    Setting(
        "openclip_times_world_size",
        OPENCLIP,
        "open-clip-torch",
        "the defaults with the loss x P before backward (tevatron's compensation for a gather "
        "without gradient)",
        False,
        accum=OPENCLIP_ACCUM,
    ),
    Setting(
        "sbert_mnrl",
        SBERT,
        SBERT,
        "MultipleNegativesRankingLoss, gather_across_devices=False (its default): the rank's K "
        "microbatches one per-device batch, torch DDP",
        True,
    ),
    Setting(
        "sbert_mnrl_gather",
        SBERT,
        SBERT,
        "MultipleNegativesRankingLoss, gather_across_devices=True",
        False,
    ),
    Setting(
        "sbert_cached_mnrl",
        SBERT,
        SBERT,
        "CachedMultipleNegativesRankingLoss (GradCache), gather_across_devices=False, "
        "mini_batch_size = the largest microbatch",
        False,
    ),
    Setting(
        "sbert_cached_mnrl_gather",
        SBERT,
        SBERT,
        "CachedMultipleNegativesRankingLoss (GradCache), gather_across_devices=True",
        False,
    ),
    Setting(
        "sbert_mnrl_accumulate",
        SBERT,
        SBERT,
        "MultipleNegativesRankingLoss with naive gradient accumulation: one microbatch a "
        "microstep, each loss / K, DDP's no_sync but the last",
        False,
    ),
    Setting(
        "sbert_mnrl_gather_accumulate",
        SBERT,
        SBERT,
        "MultipleNegativesRankingLoss, gather_across_devices=True, with naive gradient "
        "accumulation: one microbatch a microstep, each loss / K, DDP's no_sync but the last",
        False,
    ),
)
