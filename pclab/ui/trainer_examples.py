"""The bundled example trainers of the "Check a trainer" page, by option code (= the file stem
in examples/trainers/), with the scheme each one applies: the exercise's answer key.

Kept apart from ui.trainer_views (Altair, pandas) so the home page can count them without
loading a chart library.

    python -c "from pclab.ui.trainer_examples import EXAMPLES; print(len(EXAMPLES))"
"""

EXAMPLES = {  # option code (= file stem) -> the scheme its train_step applies
    "correct_manual": "global_token",
    "correct_ddp_no_sync": "global_token",
    "ddp_mean_of_local_means": "replica_mean",
    "microbatch_means": "microbatch_mean",
    "double_divide_by_k": "double_scaled",
    "unnormalised_sum": "unnormalised_sum",
    "adamw_steps_at_zero": "global_token",  # right weights; its slip is the step at N = 0
    # written for the check's v2 contract: each sets one optional attribute (V2_EXAMPLES)
    "clip_global_norm": "global_token",  # clipped once, globally: MAX_GRAD_NORM
    "correct_float32": "global_token",  # DTYPE = "float32", a measured tolerance
    "own_microbatches": "global_token",  # make_microbatch: a regression network, no LM
    # the real transformers.Trainer (measured with 5.24.0; README, "The Hugging Face Trainer")
    "hf_trainer": "global_token",  # average_tokens_across_devices=True, the default
    "hf_trainer_local_average": "replica_mean",  # False: each rank divides by its own count
    "hf_trainer_no_first_label": "global_token",  # True, no label at position 0
}
HF_EXAMPLES = ("hf_trainer", "hf_trainer_local_average", "hf_trainer_no_first_label")
V2_EXAMPLES = {  # option code -> the optional v2 attribute it shows
    "clip_global_norm": "MAX_GRAD_NORM",
    "correct_float32": "DTYPE",
    "own_microbatches": "make_microbatch",
}
# issue 28: coupled trainers (batch_loss / embed), on their own view (ui.trainer_coupled)
COUPLED_EXAMPLES = {  # option code (= file stem) -> the scheme (core.coupled_schemes) it applies
    "gradcache": "global_batch",
    "gather_with_grad": "global_batch",  # at K = 1
    "naive_accumulation": "microbatch_pool",
    "naive_accumulation_gather": "microstep_pool",
    "remote_detached": "remote_detached",
    "scaled_by_world_size": "scaled",
    "batchnorm_ddp": "rank_pool",  # at K = 1 (microbatch_pool at K > 1)
}
COUPLED_MODEL = "tiny_embedder"  # the model the embedding examples import
SELF_CONTAINED = (
    "hf_trainer",
    "own_microbatches",
    "batchnorm_ddp",
)  # their model is in the file itself
