"""OLMo-core's `TransformerTrainModule` with FSDP, checked as it ships: its own `train_batch`
takes this rank's whole batch (K microbatches of BATCH_SIZE rows), splits it into its own
micro-batches (rank_microbatch_size = BATCH_SIZE x SEQ_LEN tokens), divides each one's summed
loss by the rank's label count (`loss_div_factor=batch_num_tokens_for_loss`) and back-propagates
it through FSDP2, whose reduce-scatter averages over the ranks; `optim_step` steps.

    pclab check examples/frameworks/olmo_core/olmo_core_train_module.py --json   # its environment
    python -m bench.framework_env ai2-olmo-core      # builds it, records the row

The model is OLMo-core's own `TransformerConfig.olmo2_1M` at one layer and 11 tokens (9,916
parameters, float32; no download). OLMo-core labels are aligned with the positions they are
predicted at (its `get_labels`: labels = input_ids[:, 1:], then -100), so the check's labels
(a label at t is predicted from t - 1) are handed over shifted by one, and a label at position
0, no term, is dropped. What is set here, each because one checkable update needs it:
- the train module re-initialises the weights it shards (`init_weights`): the check's initial
  weights are loaded back into the sharded model (`set_model_state_dict`) before the step;
- the optimizer is built by the module from an `OptimConfig` of torch's SGD at the learning
  rate of the one the check hands in (OLMo-core ships no SGD config); the check compares the
  parameters (`full_parameters`);
- every train_step is a new run in the same process, and OLMo-core builds one device mesh per
  process (`build_world_mesh` refuses a second): its registry is cleared first, and the mesh
  it builds again is the same, the check's two ranks;
- the module records its metrics through its `Trainer`, which needs a data loader and a save
  folder: `metrics_only` stands in for those two calls (`record_metric`, `record_ce_loss`),
  keeping nothing. No number of the update goes through it.

ai2-olmo-core is imported inside the functions: only the ranks pay for it.
"""

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

# framework_lm.py (the model and evidence most adapters share) is in ../shared/
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))

from framework_lm import IGNORE, StepCounter, record  # noqa: E402
from torch.nn import functional as F  # noqa: E402

__all__ = ["BATCH_SIZE", "DTYPE", "SEQ_LEN", "VOCAB_SIZE"]
__all__ += ["build_model", "full_parameters", "token_losses", "train_step"]
ADAPTER = Path(__file__).stem  # names this setting in the record
VOCAB_SIZE = 11
SEQ_LEN = 8  # the module's max_sequence_length
BATCH_SIZE = 2  # rows per microbatch: rank_microbatch_size = BATCH_SIZE x SEQ_LEN tokens
DTYPE = "float32"  # OLMo-core's model and loss


def build_model() -> torch.nn.Module:
    """OLMo-core's olmo2_1M config at one layer, 11 tokens: fixed seed, float32, CPU."""
    from olmo_core.nn.transformer import TransformerConfig

    torch.manual_seed(0)
    config = TransformerConfig.olmo2_1M(vocab_size=VOCAB_SIZE, n_layers=1, n_heads=2, head_dim=4)
    model = config.build(init_device="cpu")
    with torch.no_grad():  # spread weights, so each microbatch's gradient differs
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    return model


def aligned(labels: torch.Tensor) -> torch.Tensor:
    """The check's labels in OLMo-core's alignment: the label predicted at position t."""
    end = torch.full((labels.shape[0], 1), IGNORE, dtype=labels.dtype)
    return torch.cat([labels[:, 1:], end], dim=1)


def token_losses(model, microbatch) -> torch.Tensor:
    """The module's terms: position t predicts the label at t + 1, -100 skipped."""
    logits = model(microbatch["input_ids"])
    labels = aligned(microbatch["labels"])
    counted = labels != IGNORE
    return F.cross_entropy(logits.float()[counted], labels[counted], reduction="none")


def full_parameters(model):
    """The full parameters after the step, gathered from every rank's FSDP shard."""
    return {n: p.full_tensor() for n, p in model.named_parameters()}


def sgd_config(lr: float):
    """An OLMo-core OptimConfig that builds torch.optim.SGD."""
    from olmo_core.optim.config import OptimConfig

    @dataclass
    class SGDConfig(OptimConfig[torch.optim.SGD]):
        lr: float = 0.1

        @classmethod
        def optimizer(cls):
            return torch.optim.SGD

    return SGDConfig(lr=lr)


class metrics_only:  # noqa: N801 - stands in for the Trainer's two metric calls
    """What the train module asks of its Trainer during a step: recording metrics."""

    def record_metric(self, *args, **kwargs) -> None:
        return None

    def record_ce_loss(self, *args, **kwargs) -> None:
        return None


def train_step(model, optimizer, microbatches):
    """One update by OLMo-core's TransformerTrainModule (FSDP) over this rank's K."""
    from olmo_core.distributed import parallel
    from olmo_core.distributed.parallel import DataParallelType
    from olmo_core.train.train_module import TransformerTrainModule
    from olmo_core.train.train_module.transformer.config import TransformerDataParallelConfig
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
    parallel._WORLD_MESH = None  # one run per train_step: OLMo-core keeps one mesh a process
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    module = TransformerTrainModule(
        model,
        sgd_config(optimizer.param_groups[0]["lr"]),
        rank_microbatch_size=BATCH_SIZE * SEQ_LEN,
        max_sequence_length=SEQ_LEN,
        dp_config=TransformerDataParallelConfig(name=DataParallelType.fsdp),
        device=torch.device("cpu"),
    )
    set_model_state_dict(model, initial, options=StateDictOptions(full_state_dict=True))
    module._trainer = metrics_only()
    counter = StepCounter(module.optim)
    batch = {
        "input_ids": torch.cat([mb["input_ids"] for mb in microbatches]),
        "labels": torch.cat([aligned(mb["labels"]) for mb in microbatches]),
    }
    module.zero_grads()
    module.train_batch(batch)
    module.optim_step()
    record(
        ADAPTER,
        optimizer_steps=counter.close(),
        optimizer_class=type(module.optim).__name__,
        optimizer_is_the_one_passed=module.optim is optimizer,
        wrapped_in=type(model).__name__,  # FSDPTransformer
        parameter_type=type(next(model.parameters())).__name__,  # DTensor
        counted=int((batch["labels"] != IGNORE).sum()),  # the module's loss_div_factor
    )
