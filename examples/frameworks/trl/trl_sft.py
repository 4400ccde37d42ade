"""TRL's `SFTTrainer`, checked as it ships: one optimizer update over this rank's K
microbatches with SFTTrainer's defaults (text data, labels built from the inputs).

    pclab check examples/frameworks/trl/trl_sft.py --json

The data is text: each microbatch is BATCH_SIZE documents of words from a ten-word vocabulary
(make_microbatch(n_terms, generator) picks their lengths so the documents hold n_terms terms).
SFTTrainer prepares it its own way - appends the end-of-sequence token, tokenizes with the
tokenizer it is given (a word-level one built here, no download), copies the labels from
input_ids - and its collator pads each microbatch, -100 on the padding. A document of w words
is w + 1 tokens and w terms: position t predicts the token at t + 1. Each microbatch also
carries input_ids and labels built here from the same words, which only token_losses reads: the
check's own account of the terms, independent of TRL's pipeline.

The model is hf_trainer.py's one-layer Llama (CPU, from a config) with TRL's fused LM head, the
head SFTTrainer itself puts on every model it trains; token_losses reads the terms from it, so
the reference and SFTTrainer take the same per-token log-probabilities and the check compares
only how they are normalised, accumulated and averaged. That head computes its log-softmax in
float32 whatever the model's precision, so the model is float32 (DTYPE): the check measures
its tolerance from the reference's own float32 floor.

`train_step` hands the lab's optimizer to a real SFTTrainer (its own default scheduler, and
its default gradient clipping at 1.0, which the reference applies too: MAX_GRAD_NORM) and lets
it do the rest: it counts the labels of the accumulated microbatches over both ranks
(`num_items_in_batch`), divides each microstep's summed loss by that count, multiplies by the
number of processes, lets DDP average on the last microstep and steps. One SFTConfig default is
changed: bf16=False, since bf16=True would run the model under bfloat16 autocast, whose
rounding would swamp what the check measures. The only trainer method replaced is the
dataloader (hf_trainer.InOrder): this rank's microbatches in order, one per microstep, not
shuffled and split across the processes a second time.

trl is imported inside the functions: the command imports this file in its own process to
check the contract, and only the ranks pay for the import.
"""

import os
import sys
import tempfile
from pathlib import Path

import torch

# the neighbours of other folders: hf_trainer.py (the Trainer adapter) in ../hf_trainer/,
# framework_lm.py (the model and evidence most adapters share) in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hf_trainer"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_lm import StepCounter, record  # noqa: E402
from hf_trainer import BATCH_SIZE, IGNORE, ONE_QUIET_STEP_ON_CPU, SEQ_LEN, InOrder  # noqa: E402
from hf_trainer import build_model as build_llama  # noqa: E402

__all__ = ["BATCH_SIZE", "DTYPE", "MAX_GRAD_NORM", "SEQ_LEN"]
__all__ += ["build_model", "make_microbatch", "token_losses", "train_step"]
DTYPE = "float32"  # TRL's fused LM head computes in float32 whatever the model's precision
ADAPTER = Path(__file__).stem  # names this setting in the record
MAX_GRAD_NORM = 1.0  # SFTConfig's default max_grad_norm: the reference clips as Trainer does
WORDS = "abcdefghij"  # the vocabulary's words; token 0 is the end of sequence, "</s>"
EOS = "</s>"
ROW_TOKENS = SEQ_LEN + 1  # the longest document: SEQ_LEN words and its end of sequence
_QUIET: list[bool] = []  # set once this process has been made quiet


def build_model() -> torch.nn.Module:
    """hf_trainer.py's Llama with TRL's fused LM head (trl.trainer.add_fused_lm_head), as
    SFTTrainer patches it: model(..., labels=..., fused_lm_head=True) gives log-probabilities."""
    from trl.trainer import add_fused_lm_head

    model = build_llama().to(torch.float32)
    add_fused_lm_head(model)
    return model


def tokenizer():
    """A word-level tokenizer over WORDS with "</s>" as its end of sequence (no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {EOS: 0} | {w: i + 1 for i, w in enumerate(WORDS)}
    words = Tokenizer(models.WordLevel(vocab, unk_token=EOS))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=words, eos_token=EOS)


def split(n_terms: int, parts: int, most: int, generator) -> list[int]:
    """n_terms split at random into `parts` whole numbers, each 0..most."""
    sizes = []
    for left in range(parts, 0, -1):
        low, high = max(0, n_terms - most * (left - 1)), min(most, n_terms)
        size = low + int(torch.randint(high - low + 1, (1,), generator=generator))
        sizes.append(size)
        n_terms -= size
    return sizes


def random_words(n: int, generator) -> list[int]:
    return (torch.randint(len(WORDS), (n,), generator=generator) + 1).tolist()


def as_text(ids: list[int]) -> str:
    return " ".join(WORDS[i - 1] for i in ids)


def checked_rows(documents: list[tuple[list[int], list[int]]]) -> dict:
    """The check's own account of documents given as (prompt ids, completion ids): every
    token, the end of sequence included, right-padded to ROW_TOKENS; a label on each
    completion token (the prompt's and the padding's are IGNORE). token_losses reads these."""
    shape = (len(documents), ROW_TOKENS)
    input_ids, labels = torch.zeros(shape, dtype=torch.long), torch.full(shape, IGNORE)
    mask = torch.zeros(shape, dtype=torch.long)
    for row, (prompt, completion) in enumerate(documents):
        ids = [*prompt, *completion, 0]  # 0: the end of sequence SFTTrainer appends
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, len(prompt) : len(ids)] = torch.tensor(ids[len(prompt) :])
        mask[row, : len(ids)] = 1
    return {"input_ids": input_ids, "labels": labels, "attention_mask": mask}


def documents_of(lengths: list[int], generator) -> dict:
    """Text documents of these word counts ("text", what SFTTrainer is given) and the
    check's account of them: a document of w words holds w terms."""
    docs = [random_words(w, generator) for w in lengths]
    return {"text": [as_text(d) for d in docs]} | checked_rows([([], d) for d in docs])


def make_microbatch(n_terms, generator):
    """BATCH_SIZE documents holding n_terms terms between them (each at most SEQ_LEN)."""
    return documents_of(split(n_terms, BATCH_SIZE, SEQ_LEN, generator), generator)


def token_losses(model, microbatch):
    """The terms: minus TRL's log-probability of every labelled token after the first of its
    document (position t predicts the label at t + 1)."""
    out = model(
        input_ids=microbatch["input_ids"],
        attention_mask=microbatch["attention_mask"],
        labels=microbatch["labels"],
        fused_lm_head=True,
    )
    return -out.log_probs[out.label_mask]


def _quiet_and_fast() -> None:
    """Once per rank process: hf_trainer.py's quiet, and no progress bars from datasets."""
    import datasets
    from hf_trainer import _quiet_and_fast as quiet_transformers

    quiet_transformers()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # else it warns after a fork
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()


def rows_of(microbatches) -> dict[str, list]:
    """The dataset's columns: every document of every microbatch, in order."""
    keys = [k for k in ("text", "prompt", "completion") if k in microbatches[0]]
    return {k: [doc for mb in microbatches for doc in mb[k]] for k in keys}


def train_step(model, optimizer, microbatches, adapter=ADAPTER, rows=BATCH_SIZE, **settings):
    """One optimizer update by TRL's SFTTrainer over this rank's K microbatches; `settings`
    are the SFTConfig fields of the setting under test (none: the defaults), `rows` its
    per_device_train_batch_size (dataset rows per microstep), `adapter` names the record."""
    import datasets
    from transformers import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    if not _QUIET:
        _quiet_and_fast()
        _QUIET.append(True)

    class OneRankSFTTrainer(InOrder, SFTTrainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            # notes what TRL's collator built for this microstep: its shape and its terms
            self.batches.append(list(inputs["input_ids"].shape))
            self.terms.append(int((inputs["labels"][:, 1:] != IGNORE).sum()))
            return super().training_step(model, inputs, num_items_in_batch)

    counter = StepCounter(optimizer)
    with tempfile.TemporaryDirectory(prefix="pcl-trl-") as out:
        args = SFTConfig(
            output_dir=out,
            per_device_train_batch_size=rows,
            gradient_accumulation_steps=len(microbatches),
            max_steps=1,
            bf16=False,  # bf16=True, SFTConfig's default, autocasts to bfloat16
            **ONE_QUIET_STEP_ON_CPU,
            **settings,
        )
        trainer = OneRankSFTTrainer(
            model=model,
            args=args,
            train_dataset=datasets.Dataset.from_dict(rows_of(microbatches)),
            processing_class=tokenizer(),
            optimizers=(optimizer, None),  # the lab's optimizer, SFTTrainer's own scheduler
        )
        trainer.remove_callback(PrinterCallback)
        trainer.batches, trainer.terms = [], []
        trainer.train()
    _record(adapter, trainer, counter)


def _record(adapter: str, trainer, counter: StepCounter) -> None:
    """Every rank's evidence that SFTTrainer's own loop made the update ($PCL_FRAMEWORK_RECORD)."""
    record(
        adapter,
        global_step=trainer.state.global_step,
        optimizer_steps=counter.close(),
        gradient_accumulation_steps=trainer.args.gradient_accumulation_steps,
        distributed_type=trainer.accelerator.distributed_type.name,  # MULTI_CPU: Gloo
        wrapped_in=type(trainer.model_wrapped).__name__,  # DistributedDataParallel
        collator=type(trainer.data_collator).__name__,
        padding_free=trainer.padding_free,
        completion_only_loss=trainer.completion_only_loss,
        packing=trainer.args.packing,
        grad_sync=trainer.synced,  # per microstep: only the last one all-reduces
        num_items_in_batch=trainer.counted,  # per microstep, as Trainer passed it on
        batches=trainer.batches,  # per microstep: the collated input_ids' shape
        terms=trainer.terms,  # per microstep: the collated labels that are terms
        max_grad_norm=trainer.args.max_grad_norm,
        average_tokens_across_devices=trainer.args.average_tokens_across_devices,
    )
