"""The bundled examples, every file by its code (its stem): examples/trainers/, the contract by
example (one file per verdict, ready to copy), and examples/frameworks/<framework>/, the
framework table's adapters (frameworks.table) with the modules they share. The "Check a
trainer" page lists its examples from here; examples/README.md is this index rendered with
each adapter's recorded verdict (frameworks.readme_table; a test holds it to the files on
disk and to the record).

    python -m pclab.experiments.trainer_check.frameworks --readme   # rewrite examples/README.md
"""

from __future__ import annotations

from pathlib import Path

from pclab.experiments.trainer_check.example_entry import DIFFERENT, SAME, _t
from pclab.experiments.trainer_check.example_entry import HF as HF  # the index's names
from pclab.experiments.trainer_check.example_entry import Example as Example
from pclab.experiments.trainer_check.example_entry import Module as Module
from pclab.experiments.trainer_check.examples_run import RUN as RUN
from pclab.experiments.trainer_check.frameworks.run_table import ROWS as RUN_ROWS
from pclab.experiments.trainer_check.frameworks.setting import SHARED
from pclab.experiments.trainer_check.frameworks.table import SETTINGS
from pclab.paths import EXAMPLES_ROOT

INDEX = EXAMPLES_ROOT / "README.md"
BLOCK = "examples-index"  # its markers: <!-- examples-index:start/end -->


TOKEN = (  # the page's token examples, in its order (each verdict: tests/runners/)
    _t("correct_manual", "by hand: token-loss sums ÷ the global count N", "global_token", SAME),
    _t("correct_ddp_no_sync", "DDP with `no_sync()`: each sum × P ÷ N", "global_token", SAME),
    _t(
        "ddp_mean_of_local_means",
        "each rank's own mean, then DDP's mean of the ranks",
        "replica_mean",
        DIFFERENT,
    ),
    _t(
        "microbatch_means",
        "each microbatch's own mean ÷ K, then DDP's mean",
        "microbatch_mean",
        DIFFERENT,
    ),
    _t("double_divide_by_k", "the global token mean ÷ K once more", "double_scaled", DIFFERENT),
    _t("unnormalised_sum", "token losses summed, never divided", "unnormalised_sum", DIFFERENT),
    _t(
        "adamw_steps_at_zero",
        "right weights, but AdamW steps at N = 0 (`zero_must_skip`)",
        "global_token",
        DIFFERENT,
    ),
    _t(
        "clip_global_norm",
        "v2: clipped once by the global norm (`MAX_GRAD_NORM`)",
        "global_token",
        SAME,
    ),
    _t("correct_float32", "v2: a float32 model (`DTYPE`)", "global_token", SAME),
    _t(
        "own_microbatches",
        "v2: its own data, no language model (`make_microbatch`)",
        "global_token",
        SAME,
    ),
    Example(
        f"{HF}/hf_trainer.py",
        "the real `transformers.Trainer`, `average_tokens_across_devices=True`",
        "global_token",
        SAME,
    ),
    Example(
        f"{HF}/hf_trainer_local_average.py",
        "the real `transformers.Trainer`, `average_tokens_across_devices=False`",
        "replica_mean",
        DIFFERENT,
    ),
    Example(
        f"{HF}/hf_trainer_no_first_label.py",
        "the real `transformers.Trainer` with no label at position 0",
        "global_token",
        SAME,
    ),
)
COUPLED = (  # the page's coupled examples (batch_loss / embed), in its order
    _t(
        "gradcache",
        "GradCache: one loss over the global batch at any P and K",
        "global_batch",
        SAME,
    ),
    _t(
        "gather_with_grad",
        "a gradient-carrying gather, meant for K = 1",
        "global_batch",
        SAME,
        accum=1,
    ),
    _t("naive_accumulation", "accumulation without a gather", "microbatch_pool", DIFFERENT),
    _t(
        "naive_accumulation_gather",
        "a gather per microstep: the pool does not grow",
        "microstep_pool",
        DIFFERENT,
    ),
    _t(
        "remote_detached",
        "`dist.all_gather`: other ranks' documents carry no gradient",
        "remote_detached",
        DIFFERENT,
    ),
    _t(
        "scaled_by_world_size",
        "a gradient-carrying gather with the loss × P",
        "scaled",
        DIFFERENT,
        accum=1,
    ),
    _t("batchnorm_ddp", "BatchNorm under plain DDP: a pool per rank", "rank_pool", DIFFERENT, 1),
)
MODULES = (  # examples/trainers/' modules
    Module("trainers/tiny_lm.py", "the tiny causal LM every token example imports"),
    Module("trainers/tiny_embedder.py", "the embedding model every coupled example imports"),
    Module("trainers/run_loop.py", "what the run examples share besides their loop"),
)


def files() -> dict[str, Path]:
    """code -> its file, for every file the index lists (a code names one file only)."""
    found = {e.code: e.file for e in (*TOKEN, *COUPLED, *RUN, *MODULES)}
    found |= {s.code: s.path for s in SHARED}
    found |= {s.code: s.path for s in SETTINGS if s.adapter}
    found |= {stem: row.path(stem) for row in RUN_ROWS for stem in row.adapters()}
    return found


def run_rows_not_offered() -> list[tuple[str, Path, str]]:
    """The run table's adapters the page does not offer (a framework with an environment of
    its own, bench/framework_env.py; a coupled run's, which the page does not show yet):
    (code, file, framework), in the table's order. The index lists them with their recorded
    story."""
    offered = {e.code for e in RUN}
    return [
        (stem, row.path(stem), row.framework)
        for row in RUN_ROWS
        for stem in row.adapters()
        if stem not in offered
    ]


def path_of(code: str) -> Path:
    """The file of a bundled example or adapter, from its code alone (ValueError otherwise)."""
    found = files()
    if code not in found:
        raise ValueError(f"example={code!r} is not a bundled example: one of {', '.join(found)}")
    return found[code]
