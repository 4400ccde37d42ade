"""Corpus, tokenizer and the experiment's four windows (pure Python: no torch import).

The corpus is the lab's own prose (corpus/en.md, corpus/zh.md). A byte-level BPE tokenizer
(Hugging Face `tokenizers`) trained on it holds exactly 387 entries: the end-of-text token
(also the padding id), the 256 byte values and 130 merges.

Windows and labels, made explicit (causal LM shift):
    A document's token stream t_0 .. t_{T-1} is cut into chunks of 97 tokens with stride 96.
    Chunk j feeds inputs t_{96j} .. t_{96j+95}; input position i's label is the NEXT token
    t_{96j+i+1}. The document's tail chunk is shorter: its last input has no next token, so
    a tail window with m + 1 real tokens has m labelled positions and 96 - m padding inputs.
    Padding sits at the end; causal attention keeps real positions from seeing it, and a
    padding position never carries a label, so it never counts in N.
The user picks, per window, how many of its FINAL label positions carry a label
(0 .. capacity); only those count in N.

    python -c "from pclab.experiments.transformer.lm import data; print(data.experiment_windows())"
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from pclab.core import validation as v
from pclab.experiments.transformer.lm import artifacts
from pclab.paths import PACKAGE_DIR

ROOT = PACKAGE_DIR
CORPUS = ROOT / "corpus"
DOCUMENTS = ("en", "zh")  # corpus/<name>.md, in this order
VOCAB_SIZE = 387
CONTEXT = 96
END_OF_TEXT = "<|endoftext|>"  # id 0; also the padding input (never labelled)
MIN_TAIL_TOKENS = 48

# (document, chunk index or "tail"): three full windows and one document's tail.
EXPERIMENT_WINDOWS = (("en", 9), ("zh", 26), ("en", 80), ("zh", "tail"))
DEFAULT_LABELS = (40, 7, 0, 23)

# The experiment's plan (shared by the torch-free launcher side and the torch worker side).
BRANCHES = (
    "full_batch",
    "accum_global_n",
    "accum_microbatch_mean",
    "ddp_mean_of_means",
    "ddp_pn_scale",
)
DISTRIBUTED_BRANCHES = ("ddp_mean_of_means", "ddp_pn_scale")
OPTIMIZERS = ("sgd", "adamw")
MICROBATCHES = ((0, 1), (2, 3))  # single-process accumulation: K = 2 microbatches of 2 windows
TOLERANCE = 2e-10


def corpus_paths() -> tuple[Path, ...]:
    return tuple(CORPUS / f"{name}.md" for name in DOCUMENTS)


def train_tokenizer() -> Tokenizer:
    """Byte-level BPE on the corpus, 387 entries; deterministic for a given corpus."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[END_OF_TEXT],
        show_progress=False,
    )
    tokenizer.train([str(p) for p in corpus_paths()], trainer)
    if tokenizer.get_vocab_size() != VOCAB_SIZE:
        raise ValueError(
            f"tokenizer has {tokenizer.get_vocab_size()} entries, expected {VOCAB_SIZE}"
        )
    return tokenizer


def load_tokenizer(text: str) -> Tokenizer:
    """A tokenizer from its JSON text, checked to hold exactly 387 entries."""
    tokenizer = Tokenizer.from_str(text)
    if tokenizer.get_vocab_size() != VOCAB_SIZE:
        raise ValueError(
            f"tokenizer has {tokenizer.get_vocab_size()} entries, expected {VOCAB_SIZE}"
        )
    return tokenizer


@cache
def committed_tokenizer() -> Tokenizer:
    """The committed artifacts/tokenizer.json, hash-checked against the manifest (the corpus
    files too, since the windows are cut from them); loaded once per process."""
    for path in corpus_paths():
        artifacts.verified_bytes(str(path.relative_to(ROOT)))
    return load_tokenizer(artifacts.verified_bytes(artifacts.TOKENIZER).decode("utf-8"))


def document_ids(tokenizer: Tokenizer) -> dict[str, tuple[int, ...]]:
    """Each corpus document's token ids."""
    return {
        name: tuple(tokenizer.encode(path.read_text(encoding="utf-8")).ids)
        for name, path in zip(DOCUMENTS, corpus_paths(), strict=True)
    }


def full_chunks(ids: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Every 97-token chunk (96 inputs + the token after them), stride 96."""
    return [ids[start : start + CONTEXT + 1] for start in range(0, len(ids) - CONTEXT, CONTEXT)]


def tail_chunk(ids: tuple[int, ...]) -> tuple[int, ...]:
    """The tokens after the last full chunk's inputs: a window shorter than 96."""
    return ids[len(full_chunks(ids)) * CONTEXT :]


@dataclass(frozen=True)
class Window:
    document: str
    index: int | str  # chunk index, or "tail"
    chunk: tuple[int, ...]  # real tokens: inputs = chunk[:-1], labels = chunk[1:]

    @property
    def capacity(self) -> int:
        """Positions that have a next token: 96 for a full window, fewer for a tail."""
        return len(self.chunk) - 1

    @property
    def padding(self) -> int:
        return CONTEXT - self.capacity


# The windows last cut, with the tokenizer object they were cut with. The committed tokenizer
# is itself loaded once per process (committed_tokenizer is cached, hash-checked on load), so
# while that object lives the windows cannot change; a reload gives a new object and a new cut.
# Cutting re-tokenises the whole corpus (15-18 ms), which every cached page call used to pay.
_LAST_CUT: list[tuple[object, tuple[Window, ...]]] = []


def experiment_windows(tokenizer: Tokenizer | None = None) -> tuple[Window, ...]:
    """The four windows of the experiment, in EXPERIMENT_WINDOWS order.

    With no tokenizer, the committed artifacts/tokenizer.json is used (manifest-verified).
    """
    if tokenizer is None:
        tokenizer = committed_tokenizer()
    held = _LAST_CUT[:1]
    if held and held[0][0] is tokenizer:
        return held[0][1]
    ids = document_ids(tokenizer)
    windows = []
    for document, index in EXPERIMENT_WINDOWS:
        chunk = (
            full_chunks(ids[document])[index]
            if isinstance(index, int)
            else tail_chunk(ids[document])
        )
        windows.append(Window(document, index, chunk))
    tail = windows[-1]
    if not MIN_TAIL_TOKENS <= tail.capacity < CONTEXT:
        raise ValueError(
            f"tail window has {tail.capacity} real inputs, expected {MIN_TAIL_TOKENS}..95"
        )
    _LAST_CUT[:] = [(tokenizer, tuple(windows))]
    return _LAST_CUT[0][1]


def capacities(windows) -> tuple[int, ...]:
    return tuple(w.capacity for w in windows)


def validate_labels(labels, capacity: tuple[int, ...]) -> tuple[int, ...]:
    """Per-window label counts, each a whole number in 0..capacity[i].

    Raises:
        InvalidInput (a ValueError) naming the window for a wrong length or an out-of-range
        count; TypeError for a value that is not a number.
    """
    if (
        isinstance(labels, (str, bytes))
        or not hasattr(labels, "__len__")
        or len(labels) != len(capacity)
    ):
        raise v.InvalidInput(
            "labels", labels, "in_range", f"{len(capacity)} counts, one per window"
        )
    counts = []
    for i, (value, cap) in enumerate(zip(labels, capacity, strict=True)):
        n = v.count(value, f"labels[{i}]")
        if n > cap:
            raise v.InvalidInput(f"labels[{i}]", value, "in_range", f"0..{cap}")
        counts.append(n)
    return tuple(counts)


def parse_labels(text: str, capacity: tuple[int, ...]) -> tuple[int, ...]:
    """'40,7,0,23' -> (40, 7, 0, 23), validated against each window's capacity."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise v.InvalidInput("labels", text, "non_negative_int") from None
    return validate_labels(values, capacity)


def supervised_targets(window: Window, count: int) -> tuple[int | None, ...]:
    """Label ids per input position (length 96): the last `count` real positions keep their
    next token, every other position (including padding) is None."""
    labels: list[int | None] = [None] * CONTEXT
    for i in range(window.capacity - count, window.capacity):
        labels[i] = window.chunk[i + 1]
    return tuple(labels)


def _token(tokenizer: Tokenizer, token_id: int) -> str:
    """The token's byte-level text (every id of a window is in the tokenizer)."""
    token = tokenizer.id_to_token(token_id)
    if token is None:
        raise ValueError(f"token id {token_id} is not in the tokenizer")
    return token


def split_text(tokenizer: Tokenizer, window: Window, count: int) -> tuple[str, str]:
    """The window's text cut where supervision starts: (unlabelled part, labelled targets).

    The labelled part is the last `count` target tokens. A UTF-8 character whose bytes span
    the cut goes to the labelled side, so neither side shows a broken character; a character
    cut off by the window's own edges is dropped and marked with "…".
    """
    byte_of = {ch: b for b, ch in _byte_alphabet().items()}
    pieces = [bytes(byte_of[ch] for ch in _token(tokenizer, i)) for i in window.chunk]
    raw = b"".join(pieces)
    start = 0
    while start < len(raw) and raw[start] & 0xC0 == 0x80:  # the window opens mid-character
        start += 1
    end = len(raw)
    while end > start and not _complete(raw[start:end]):  # ... or closes mid-character
        end -= 1
    cut = len(raw) - sum(len(p) for p in pieces[len(pieces) - count :]) if count else end
    while start < cut < len(raw) and raw[cut] & 0xC0 == 0x80:  # move to a character start
        cut -= 1
    cut = min(max(cut, start), end)
    head = ("…" if start else "") + raw[start:cut].decode("utf-8")
    tail = raw[cut:end].decode("utf-8") + ("…" if end < len(raw) else "")
    if not count and end < len(raw):
        head, tail = head + "…", ""
    return head, tail


def _complete(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@cache
def _byte_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable character map that byte-level BPE tokens are spelled in."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    )
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping
