"""The real Hugging Face `transformers.Trainer` of hf_trainer.py (`average_tokens_across_devices`
True, the default), checked with no counted label at position 0 of any sequence.

A causal LM's loss shifts the labels: position t predicts the label at t + 1, so a label at
position 0 is never a term. A trainer that counted labels before that shift would count one
too many per labelled first position, and its weights would be off 1 for that reason alone.
Here every label the check hands over is a term, so the two counts agree and the weights
answer only the averaging question.

    pclab check examples/frameworks/hf_trainer/hf_trainer_no_first_label.py --json
"""

from hf_trainer import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, build_model, token_losses, train_step

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses", "train_step"]
FIRST_POSITION_LABELLED = False  # the check never labels position 0 (see the trainer contract)
