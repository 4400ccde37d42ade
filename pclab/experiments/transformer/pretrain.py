"""Pre-train the lab's tiny Transformer on its own corpus and write the committed artifacts.

    python -m pclab.experiments.transformer.pretrain     # 800 AdamW steps, seed 11, ~2 min
    python -m pclab.experiments.transformer.pretrain --steps 5 --out-dir /tmp/check   # a quick look

Recipe (everything the experiment later resumes from):
    tokenizer   byte-level BPE trained on corpus/en.md + corpus/zh.md, 387 entries
    data        every full 97-token chunk of both documents (inputs 96, next-token labels 96)
    model       lm.model.TinyLM, 298,176 float64 parameters, init N(0, 0.02), seed 11
    batches     8 chunks drawn uniformly with torch.Generator seeded 11, mean loss per token
    optimizer   AdamW lr 3e-3 (linear warm-up over 50 steps, then constant), betas (0.9, 0.95),
                eps 1e-8, weight decay 0.1 on every parameter, single-tensor implementation
    threads     1, deterministic algorithms: the loss curve reproduces bit for bit on one machine

Writes tokenizer.json, weights.safetensors, adamw_state.safetensors (step, exp_avg and
exp_avg_sq of every parameter at step 800) and manifest.json (each file's SHA-256, the corpus
hashes, the hyperparameters and the loss curve). No pickle anywhere.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from pclab.experiments.transformer.lm import artifacts, data
from pclab.experiments.transformer.lm.model import ModelConfig, TinyLM, loss_sum

SEED = 11
STEPS = 800
BATCH_SIZE = 8
LR = 3e-3
WARMUP_STEPS = 50
BETAS = (0.9, 0.95)
EPS = 1e-8
WEIGHT_DECAY = 0.1


@dataclass(frozen=True)
class PretrainResult:
    loss_curve: tuple[float, ...]  # mean loss per token of each step's batch, before its update
    seconds: float
    model: TinyLM
    optimizer: torch.optim.AdamW
    tokenizer_json: str


@contextmanager
def _deterministic():
    """One thread and deterministic kernels for the run; the caller's settings come back after."""
    threads, strict = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(strict)


def pretrain(
    steps: int = STEPS, progress: Callable[[int, float], None] | None = None
) -> PretrainResult:
    """Train the tokenizer, then `steps` AdamW steps from seed 11 (progress(step, loss) each)."""
    start = time.perf_counter()
    with _deterministic():
        torch.manual_seed(SEED)
        tokenizer = data.train_tokenizer()
        chunks = [c for ids in data.document_ids(tokenizer).values() for c in data.full_chunks(ids)]
        table = torch.tensor(chunks, dtype=torch.long)  # (num_chunks, 97)
        model = TinyLM(ModelConfig())
        model.init_weights(SEED)
        optimizer = torch.optim.AdamW(
            model.parameters(),
            lr=LR,
            betas=BETAS,
            eps=EPS,
            weight_decay=WEIGHT_DECAY,
            foreach=False,
        )
        generator = torch.Generator().manual_seed(SEED)
        curve = []
        for step in range(1, steps + 1):
            for group in optimizer.param_groups:
                group["lr"] = LR * min(1.0, step / WARMUP_STEPS)
            batch = table[torch.randint(len(chunks), (BATCH_SIZE,), generator=generator)]
            inputs, targets = batch[:, :-1], batch[:, 1:]
            loss = loss_sum(model, inputs, targets) / targets.numel()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            curve.append(loss.item())
            if progress is not None:
                progress(step, curve[-1])
    return PretrainResult(
        tuple(curve), time.perf_counter() - start, model, optimizer, tokenizer.to_str()
    )


def write_artifacts(result: PretrainResult, root: Path = artifacts.ROOT) -> dict:
    """Write the four artifacts under `root`/artifacts and return the manifest."""
    from safetensors.torch import save

    out = root / "artifacts"
    out.mkdir(parents=True, exist_ok=True)
    weights = {n: p.detach().clone().contiguous() for n, p in result.model.named_parameters()}
    meta = {"seed": str(SEED), "steps": str(len(result.loss_curve))}
    payloads = {
        artifacts.TOKENIZER: result.tokenizer_json.encode("utf-8"),
        artifacts.WEIGHTS: save(weights, metadata=meta),
        artifacts.ADAMW_STATE: save(
            artifacts.adamw_tensors(result.model, result.optimizer), metadata=meta
        ),
    }
    for name, payload in payloads.items():
        (root / name).write_bytes(payload)
    for path in data.corpus_paths():
        payloads[str(path.relative_to(data.ROOT))] = path.read_bytes()
    files = {
        name: {"sha256": artifacts.sha256(p), "bytes": len(p)}
        for name, p in sorted(payloads.items())
    }
    manifest = {
        "description": (
            "Pre-training artifacts of the lab's tiny Transformer "
            "(python -m pclab.experiments.transformer.pretrain)."
        ),
        "seed": SEED,
        "steps": len(result.loss_curve),
        "batch_size": BATCH_SIZE,
        "tokens_per_step": BATCH_SIZE * data.CONTEXT,
        "model": dict(
            vars(ModelConfig()), num_parameters=result.model.num_parameters(), dtype="float64"
        ),
        "optimizer": {
            "name": "AdamW",
            "lr": LR,
            "warmup_steps": WARMUP_STEPS,
            "betas": list(BETAS),
            "eps": EPS,
            "weight_decay": WEIGHT_DECAY,
        },
        "versions": {"torch": torch.__version__},
        "pretrain_seconds": round(result.seconds, 1),
        "files": files,
        "loss_curve": list(result.loss_curve),
    }
    (root / artifacts.MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def _bar(total: int) -> Callable[[int, float], None]:
    start = time.perf_counter()

    def show(step: int, loss: float) -> None:
        if step == total or step % 10 == 0:
            filled = 30 * step // total
            sys.stderr.write(
                f"\rpretrain [{'#' * filled}{'.' * (30 - filled)}] {step}/{total}"
                f"  loss {loss:.4f}  {time.perf_counter() - start:.0f} s"
            )
            sys.stderr.write("\n" if step == total else "")
            sys.stderr.flush()

    return show


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pclab.experiments.transformer.pretrain", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--steps", type=int, default=STEPS, help="AdamW steps (default 800)")
    parser.add_argument(
        "--out-dir", type=Path, default=artifacts.ROOT, help="root to write artifacts/ under"
    )
    args = parser.parse_args(argv)
    if not 1 <= args.steps <= 100_000:
        parser.exit(2, f"--steps={args.steps} is invalid: expected 1..100000\n")
    result = pretrain(args.steps, progress=_bar(args.steps))
    manifest = write_artifacts(result, args.out_dir)
    print(
        f"{manifest['model']['num_parameters']:,} parameters, {args.steps} steps in "
        f"{result.seconds:.1f} s,"
        f" final loss {result.loss_curve[-1]:.4f}; wrote {args.out_dir / 'artifacts'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
