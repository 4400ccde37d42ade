"""litgpt's full fine-tuning loop, checked as it ships: `litgpt.finetune.full.fit` makes one
optimizer update over this rank's K microbatches with its own Fabric, its own loss
(`chunked_cross_entropy`, the mean over the microbatch's counted labels after the shift), its
own accumulation (each microstep's loss / `gradient_accumulation_iters`, backward under
`fabric.no_backward_sync` until the K-th) and an optimizer its own
`instantiate_torch_optimizer` builds. litgpt's default setting.

    pclab check examples/frameworks/litgpt/litgpt_finetune.py --json   # in litgpt's environment
    python -m bench.framework_env litgpt                   # builds it, records this row

litgpt cannot share the lab's environment (it requires huggingface-hub<1.4, transformers
5.24.0 >=1.31), hence its own.

The model is litgpt's `GPT` from a tiny `Config` built here (one block, 8 wide, 11 tokens,
LayerNorm; no download), float64 on the CPU (Fabric's "64-true"). Three things are set, each
because litgpt's own choice cannot run one checkable step on two CPU processes:
- the strategy is Fabric's "ddp": `finetune/full.py` setup() picks `FSDPStrategy` whenever
  devices x nodes > 1 (full.py:107-116), and Fabric refuses FSDP on a CPU ("FSDP is only
  available on GPU", lightning/fabric/connector.py:433-439). DDP and FSDP both average the
  ranks' gradients, so the normalisation measured is the same;
- the schedule is constant: litgpt's `get_lr_scheduler` warms up as step / warmup_steps
  (full.py:417), so the first update's learning rate is 0 (and warmup_steps=0 divides by 0);
- the optimizer litgpt builds has the class and settings of the one the check hands in (as
  `--optimizer torch.optim.SGD --optimizer.lr 0.1` on litgpt's command line would), so the
  update can be solved for each microbatch's weight; the check compares the parameters.
The rank's microbatches are served in order, one per microstep, through litgpt's own SFT
collate function, not split across the processes a second time.

litgpt is imported inside the functions: only the ranks pay for it.
"""

import contextlib
import io
import logging
import os
import sys
import tempfile
from pathlib import Path

import torch

# framework_lm.py (the model and evidence most adapters share) is in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_lm import (  # noqa: E402
    BATCH_SIZE,
    IGNORE,
    SEQ_LEN,
    VOCAB_SIZE,
    StepCounter,
    record,
    shifted_losses,
)

__all__ = ["BATCH_SIZE", "SEQ_LEN", "VOCAB_SIZE", "build_model", "token_losses", "train_step"]
ADAPTER = Path(__file__).stem  # names this setting in the record
PRECISION = "64-true"  # Fabric's float64: the check's default DTYPE


def config():
    """A one-block litgpt Config, built here (no checkpoint, no download). LayerNorm, not
    RMSNorm: litgpt's RMSNorm computes in float32 (model.py:1317, `x = x.float()`), which
    leaves ~1e-8 of rounding in the update solved for each microbatch's weight."""
    from litgpt.config import Config

    return Config(
        name="pcl-tiny",
        block_size=SEQ_LEN,
        vocab_size=VOCAB_SIZE,
        padded_vocab_size=VOCAB_SIZE,
        n_layer=1,
        n_head=2,
        n_query_groups=2,
        n_embd=8,
        rotary_percentage=1.0,
        parallel_residual=False,
        bias=False,
        norm_class_name="LayerNorm",
        mlp_class_name="LLaMAMLP",
        intermediate_size=16,
    )


def build_model() -> torch.nn.Module:
    """litgpt's GPT from the tiny config: fixed seed, float64, CPU."""
    from litgpt.model import GPT

    torch.manual_seed(0)
    return GPT(config()).to(torch.float64)


def token_losses(model, microbatch) -> torch.Tensor:
    """The terms of litgpt's loss: `chunked_cross_entropy(logits[..., :-1, :], targets[..., 1:])`
    is their mean, so position t predicts the label at t + 1 and -100 is skipped."""
    return shifted_losses(model(microbatch["input_ids"]), microbatch["labels"])


def _rows(microbatches) -> list[dict]:
    """One SFT sample per sequence, as litgpt's SFTDataset yields them (with token counts)."""
    rows = []
    for mb in microbatches:
        for ids, labels in zip(mb["input_ids"], mb["labels"]):
            counted = int((labels != IGNORE).sum())
            rows.append(
                {
                    "input_ids": ids,
                    "labels": labels,
                    "token_counts": {"raw": counted, "raw_plus_prompt_template": len(ids)},
                }
            )
    return rows


def _checkpoint_dir(folder: str) -> Path:
    """What fit() reads from a checkpoint folder: a tokenizer (a word-level one, built here)."""
    from tokenizers import Tokenizer, models

    vocab = {f"t{i}": i for i in range(VOCAB_SIZE)}
    Tokenizer(models.WordLevel(vocab, unk_token="t0")).save(str(Path(folder, "tokenizer.json")))
    return Path(folder)


def _fabric(world_size: int):
    import lightning as L

    for name in ("lightning", "lightning.fabric", "lightning.pytorch"):
        logging.getLogger(name).setLevel(logging.ERROR)
    os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
    # one node, every rank a local process of the check's torchrun (or the warm pool's)
    fabric = L.Fabric(
        accelerator="cpu", devices=world_size, num_nodes=1, strategy="ddp", precision=PRECISION
    )
    fabric.launch()  # joins the check's Gloo group: it initialises none when one exists
    return fabric


def _optimizer_spec(optimizer) -> dict:
    """The handed optimizer as litgpt's --optimizer takes it: a class path and the settings
    its class takes (torch's AdamW keeps Adam's `decoupled_weight_decay` among its defaults,
    which its __init__ does not take)."""
    import inspect

    cls = type(optimizer)
    takes = inspect.signature(cls).parameters
    settings = {
        k: v
        for k, v in optimizer.defaults.items()
        if k in takes and not isinstance(v, torch.Tensor)
    }
    return {"class_path": f"{cls.__module__}.{cls.__qualname__}", "init_args": settings}


def fit_quietly(fabric, state, loaders, train, saves_to=None, resume=None) -> None:
    """litgpt's own `fit()` over `loaders` (train, then the validation its sanity check runs),
    as the litgpt adapters call it, its printed progress dropped. With `saves_to`, fit() writes
    its checkpoints there (`train.save_interval`) as `litgpt finetune_full` does, and `resume`
    is the checkpoint main() loaded into `state` (fit() then skips the microbatches it had
    run); without, no resume and nothing kept."""
    from litgpt.args import EvalArgs
    from litgpt.finetune import full

    eval_args = EvalArgs(interval=10**9, max_iters=1, initial_validation=False)
    with tempfile.TemporaryDirectory(prefix="pcl-litgpt-") as folder:
        base = _checkpoint_dir(folder)
        out_dir = Path(saves_to or folder)
        with contextlib.redirect_stdout(io.StringIO()), _its_command_line(base, out_dir):
            full.fit(
                fabric,
                state,
                *loaders,
                devices=fabric.world_size,
                resume=resume or False,
                checkpoint_dir=base,
                out_dir=out_dir,
                train=train,
                eval=eval_args,
                data=SavedData() if saves_to else None,
            )


class SavedData:
    """What fit() reads of its `data` when it saves a checkpoint: the prompt style it writes
    beside it (`save_prompt_style`, full.py:351). The check's rows are token ids with no
    prompt: litgpt's plain `Default` style."""

    def __init__(self) -> None:
        from litgpt.prompts import Default

        self.prompt_style = Default()


@contextlib.contextmanager
def _its_command_line(base: Path, out_dir: Path):
    """sys.argv as `litgpt finetune_full BASE --out_dir OUT --resume auto` gives it: beside
    each checkpoint fit() saves the command line's arguments (`save_hyperparameters(setup,
    ...)` parses sys.argv, full.py:350), which in a rank of the check are the check's own."""
    given = sys.argv
    sys.argv = ["litgpt", "finetune_full", str(base), "--out_dir", str(out_dir)]
    sys.argv += ["--resume", "auto"]
    try:
        yield
    finally:
        sys.argv = given


def train_step(model, optimizer, microbatches):
    """One optimizer update by litgpt's finetune/full.py fit() over this rank's K microbatches."""
    import torch.distributed as dist
    from litgpt.args import TrainArgs
    from litgpt.data.base import get_sft_collate_fn
    from litgpt.utils import instantiate_torch_optimizer

    world, accum = dist.get_world_size(), len(microbatches)
    fabric = _fabric(world)
    module = fabric.setup(model)
    ddp = module._forward_module
    grad_sync: list[bool] = []  # per training forward: will this backward all-reduce?
    ddp.register_forward_pre_hook(
        lambda m, _: (
            grad_sync.append(m.require_backward_grad_sync)
            if m.training and torch.is_grad_enabled()
            else None
        )
    )
    owned = instantiate_torch_optimizer(_optimizer_spec(optimizer), module.parameters())
    counter = StepCounter(owned)
    owned = fabric.setup_optimizers(owned)
    scheduler = torch.optim.lr_scheduler.LambdaLR(owned, lambda step: 1.0)  # constant
    state = {"model": module, "optimizer": owned, "scheduler": scheduler}
    state |= {"iter_num": 0, "step_count": 0}
    train = TrainArgs(
        save_interval=None,
        log_interval=10**9,  # no metrics printed
        global_batch_size=world * accum * BATCH_SIZE,  # gradient_accumulation_iters = K
        micro_batch_size=BATCH_SIZE,
        lr_warmup_steps=None,
        epochs=1,
        max_steps=1,
    )
    rows = _rows(microbatches)
    loaders = [
        torch.utils.data.DataLoader(
            rows, batch_size=BATCH_SIZE, shuffle=False, collate_fn=get_sft_collate_fn()
        )
        for _ in range(2)  # train, and the sanity-check validation fit() runs first
    ]
    loaders = fabric.setup_dataloaders(*loaders, use_distributed_sampler=False)
    fit_quietly(fabric, state, loaders, train)
    record(
        ADAPTER,
        iter_num=state["iter_num"],  # microsteps litgpt's loop ran
        step_count=state["step_count"],  # its optimizer steps
        gradient_accumulation_iters=train.gradient_accumulation_iters(world),
        strategy=type(fabric.strategy).__name__,  # DDPStrategy
        precision=type(fabric.strategy.precision).__name__,  # DoublePrecision
        wrapped_in=type(ddp).__name__,  # DistributedDataParallel
        optimizer=type(owned.optimizer).__name__,  # built by litgpt
        optimizer_is_the_checks=owned.optimizer is optimizer,
        optimizer_steps=counter.close(),
        grad_sync=grad_sync,  # per microstep: only the last one all-reduces
    )
