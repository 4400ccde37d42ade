"""The tiny SentenceTransformer the sentence-transformers adapters train (sbert_*.py), and what
the coupled check needs besides train_step: the library's own model classes and loss, nothing
downloaded.

The model is built from sentence-transformers' modules in code: a WhitespaceTokenizer over a
fixed 16-word vocabulary, WordEmbeddings (trainable), mean Pooling over the unpadded words and a
Dense layer with tanh: the composition of its "average word embeddings" models, 112 float64
parameters on the CPU. An item is a pair of short texts (anchor, positive) that share words;
`embed` tokenizes them with the model's own tokenizer and returns its sentence embeddings.

`embedding_loss` is the library's MultipleNegativesRankingLoss (its defaults: scale 20,
cosine similarity, no gather) on the rows given, rows past the queries passed as a further
column of negatives, as a dataset's hard negatives are: the check's objective is the library's.

sentence_transformers is imported inside the functions: the command imports this file in its
own process to check the contract, and that costs nothing; only the ranks pay for the import.
"""

import sys
from pathlib import Path

import torch

# framework_lm.py (the model and evidence most adapters share) is in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))


WORDS = (
    "cat dog bird fish tree river stone cloud red blue green small large fast slow bright"
).split()
DIMENSION, OUTPUT = 4, 3  # word-embedding width, sentence-embedding width
WORDS_PER_TEXT = (2, 4)  # a text has 2 to 4 words: padded, masked rows
_BUILT: dict[str, object] = {}  # this process's pristine model, deep-copied per build


def _pristine():
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import (
        Dense,
        Pooling,
        WordEmbeddings,
    )
    from sentence_transformers.sentence_transformer.modules.tokenizer import WhitespaceTokenizer

    torch.manual_seed(0)
    tokenizer = WhitespaceTokenizer(vocab=WORDS, do_lower_case=True)
    weights = torch.randn(len(WORDS), DIMENSION)  # row 0, "cat", doubles as padding id 0
    words = WordEmbeddings(tokenizer, weights, update_embeddings=True)
    pooling = Pooling(DIMENSION, pooling_mode="mean")
    dense = Dense(DIMENSION, OUTPUT, activation_function=torch.nn.Tanh())
    return SentenceTransformer(modules=[words, pooling, dense], device="cpu").double()


def build_model() -> torch.nn.Module:
    """A fresh SentenceTransformer, identical on every call (fixed seed), float64, CPU."""
    import copy

    if "model" not in _BUILT:
        _BUILT["model"] = _pristine()
    return copy.deepcopy(_BUILT["model"])


def _text(generator, base=None) -> str:
    low, high = WORDS_PER_TEXT
    n = int(torch.randint(low, high + 1, (1,), generator=generator))
    picked = torch.randint(0, len(WORDS), (n,), generator=generator).tolist()
    words = [WORDS[i] for i in picked]
    if base is not None:  # a positive keeps its anchor's first word
        words[0] = base.split()[0]
    return " ".join(words)


def make_microbatch(n, generator):
    """n (anchor, positive) text pairs; a positive shares its anchor's first word."""
    anchors = [_text(generator) for _ in range(n)]
    return {"anchor": anchors, "positive": [_text(generator, a) for a in anchors]}


def features(model, texts):
    """The model's own tokenization of the texts (input_ids, attention_mask, ...)."""
    return model.tokenize(texts)


def embed(model, microbatch):
    """(anchors, positives): the model's sentence embeddings, one row per pair."""
    return tuple(
        model(features(model, microbatch[column]))["sentence_embedding"]
        for column in ("anchor", "positive")
    )


def columns(microbatches):
    """The microbatches' pairs as one batch: [anchor texts, positive texts] in order."""
    return [[t for mb in microbatches for t in mb[c]] for c in ("anchor", "positive")]


def embedding_loss(model, queries, documents):
    """The library's MultipleNegativesRankingLoss on these rows (scale 20, cosine, no gather):
    anchor i against every document, its positive the i-th; rows past len(queries) are a
    further column of negatives."""
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    n = len(queries)
    embeddings = [queries, documents[:n]] + ([documents[n:]] if len(documents) > n else [])
    return MultipleNegativesRankingLoss(model).compute_loss_from_embeddings(embeddings, None)


def wrapped(model):
    """The model in torch DDP on the check's Gloo group, as SentenceTransformerTrainer wraps
    it (through Accelerate) for a multi-process run; the loss is handed this wrapper, as the
    trainer's compute_loss does (override_model_in_loss)."""
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model)


def counting_forwards(model):
    """A list that gets each forward's row count (the tests' evidence of how the library ran
    the model: once per column, or per mini-batch twice under GradCache); the hook's handle."""
    rows: list[int] = []
    handle = model.register_forward_hook(
        lambda module, args, output: rows.append(len(output["sentence_embedding"]))
    )
    return rows, handle


def evidence(adapter, loss, ddp, rows, microsteps, **more):
    """This rank's evidence of what ran ($PCL_FRAMEWORK_RECORD, framework_lm.record), with
    `more` (a run adapter's: steps, schedule, sampler)."""
    from framework_lm import record

    record(
        adapter,
        loss_class=f"{type(loss).__module__}.{type(loss).__name__}",
        gather_across_devices=loss.gather_across_devices,
        mini_batch_size=getattr(loss, "mini_batch_size", None),
        wrapped_in=type(loss.model).__name__,
        is_the_wrapper=loss.model is ddp,
        forward_rows=rows,
        microsteps=microsteps,
        **more,
    )


def step_on_batch(adapter, model, optimizer, microbatches, loss_name, **options):
    """One update: the rank's K microbatches as ONE per-device batch of the library's loss
    `loss_name` (built on the model, as a user builds it, with `options`), loss.model the DDP
    wrapper, one forward and backward (DDP averages the gradients over the ranks), one step."""
    from sentence_transformers.sentence_transformer import losses

    ddp = wrapped(model)
    loss = getattr(losses, loss_name)(model, **options)
    loss.model = ddp
    rows, handle = counting_forwards(model)
    optimizer.zero_grad()
    loss([features(model, texts) for texts in columns(microbatches)], None).backward()
    optimizer.step()
    handle.remove()
    evidence(adapter, loss, ddp, rows, 1)
