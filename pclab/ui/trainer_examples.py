"""The bundled example trainers of the "Check a trainer" page, by option code (= the file
stem), with the scheme each one applies: the exercise's answer key. Read from the examples'
index (experiments.trainer_check.examples, rendered as examples/README.md), never listed twice;
what is here is only how the page shows them.

Kept apart from ui.trainer_views (Altair, pandas) so the home page can count them without
loading a chart library.

    python -c "from pclab.ui.trainer_examples import EXAMPLES; print(len(EXAMPLES))"
"""

from pclab.experiments.trainer_check import examples

EXAMPLES = {e.code: e.scheme for e in examples.TOKEN}  # option code -> its step's scheme
# the real transformers.Trainer (measured with 5.24.0; README, "The Hugging Face Trainer")
HF_EXAMPLES = tuple(e.code for e in examples.TOKEN if e.path.startswith(f"{examples.HF}/"))
V2_EXAMPLES = {  # option code -> the optional v2 attribute it shows
    "clip_global_norm": "MAX_GRAD_NORM",
    "correct_float32": "DTYPE",
    "own_microbatches": "make_microbatch",
}
# issue 28: coupled trainers (batch_loss / embed), on their own view (ui.trainer_coupled)
COUPLED_EXAMPLES = {e.code: e.scheme for e in examples.COUPLED}  # schemes: core.coupled_schemes
# issue 41: run-mode loops (train_loop over epochs; the resumable ones are killed and restarted
# too), on their own view (ui.trainer_run); the value is the run diagnoses its check names
RUN_EXAMPLES = {e.code: e.scheme for e in examples.RUN}
COUPLED_LOOPS = frozenset(e.code for e in examples.RUN if e.mode == "coupled_run")  # contrastive
RUN_SHARED = {  # an example's folder below examples/ -> the module its run loops share
    "trainers": "run_loop",
    "frameworks": "framework_run",
}
COUPLED_MODEL = "tiny_embedder"  # the model the embedding examples import
SELF_CONTAINED = (
    "hf_trainer",
    "own_microbatches",
    "batchnorm_ddp",
)  # their model is in the file itself
