"""OpenCLIP's ClipLoss (open-clip-torch 3.3.0) driven for one update on CPU Gloo, under
torch's DistributedDataParallel, as open_clip_train's training loop calls it: the model's
forward returns (image_features, text_features, logit_scale.exp()), normalised as OpenCLIP's
CLIP does, with a learnable logit_scale (initialised to log(1/0.07), OpenCLIP's value). The
adapters openclip_*.py differ only in ClipLoss's two switches (and one in a x P on the loss).

ClipLoss is OpenCLIP's own code, loaded from the installed package's loss.py by its path:
`import open_clip` runs the package's __init__, which imports torchvision, and no torchvision
build loads beside the lab's torch 2.13.0 (CPU). loss.py imports torch alone (and horovod if
present), so the file is run as it ships; nothing of it is copied or changed. Install it
without its dependencies (they would bring torchvision, which would replace torch):

    pip install --no-deps -r requirements-nodeps.txt     # open-clip-torch==3.3.0
    pclab check examples/frameworks/openclip/openclip_local_gather_grad.py --accum 1 --json

The check's reference is OpenCLIP's single-process objective (`batch_loss`): ClipLoss at
world_size 1 over every rank's pairs, the symmetric image-to-text and text-to-image
cross-entropy. ClipLoss takes one document per query, so `embedding_loss` is ONE direction of
it, as ClipLoss computes each (loss.py: get_logits' logits_per_image at world_size 1, the
labels of get_ground_truth, F.cross_entropy), and SYMMETRIC = True tells the check so: it then
names the gradient paths in each direction (local_loss=True, gather_with_grad=False is
query_path_only), the pool, or the factor on each parameter group. Meant for K = 1: ClipLoss has no
accumulation of its own (open_clip_train's accum_freq lives in its train.py, which imports
the package and so torchvision), so the rank's microbatches are taken as one batch.
"""

import importlib.util
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn import functional as F

FEATURES, WIDTH = 4, 3
RECORD_ENV = "PCL_FRAMEWORK_RECORD"  # a file: one JSON line per train_step and rank (tests)
LOSS_MODULE = "pclab_open_clip_loss"  # the name open_clip/loss.py is loaded under


def clip_loss_module():
    """open_clip/loss.py of the installed open-clip-torch, run from its file: the package is
    found (find_spec does not run its __init__), its loss.py executed under a name of its own.
    ModuleNotFoundError when open-clip-torch is not installed."""
    if LOSS_MODULE in sys.modules:
        return sys.modules[LOSS_MODULE]
    package = importlib.util.find_spec("open_clip")
    if package is None or not package.submodule_search_locations:
        raise ModuleNotFoundError(
            "open-clip-torch is not installed: pip install --no-deps open-clip-torch==3.3.0"
        )
    path = Path(next(iter(package.submodule_search_locations))) / "loss.py"
    spec = importlib.util.spec_from_file_location(LOSS_MODULE, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[LOSS_MODULE] = module
    return module


class TinyClip(torch.nn.Module):
    """Two towers and a temperature, OpenCLIP's CLIP in miniature: forward returns what
    CLIP.forward does, (normalised image features, normalised text features, the scale)."""

    def __init__(self):
        super().__init__()
        self.visual = torch.nn.Linear(FEATURES, WIDTH)
        self.text = torch.nn.Linear(FEATURES, WIDTH)
        self.logit_scale = torch.nn.Parameter(torch.tensor(1 / 0.07).log())

    def forward(self, images, texts):
        image_features = F.normalize(torch.tanh(self.visual(images)), dim=-1)
        text_features = F.normalize(torch.tanh(self.text(texts)), dim=-1)
        return image_features, text_features, self.logit_scale.exp()


def build_model() -> torch.nn.Module:
    """A fresh model, identical on every call (fixed seed), float64 on the CPU."""
    torch.manual_seed(0)
    return TinyClip().double()


def make_microbatch(n, generator):
    """n (image, text) pairs, each text near its image."""
    images = torch.randn(n, FEATURES, generator=generator, dtype=torch.float64)
    noise = torch.randn(n, FEATURES, generator=generator, dtype=torch.float64)
    return {"images": images, "texts": images + 0.5 * noise}


def embed(model, microbatch):
    """(image features, text features): text i is the positive of image i."""
    image_features, text_features, _ = model(microbatch["images"], microbatch["texts"])
    return image_features, text_features


SYMMETRIC = True  # embedding_loss is one direction; the loss the mean of both (the contract)


def batch_loss(model, microbatches):
    """OpenCLIP's single-process objective over the pool's pairs: ClipLoss() at world_size 1."""
    images = torch.cat([mb["images"] for mb in microbatches])
    texts = torch.cat([mb["texts"] for mb in microbatches])
    image_features, text_features, scale = model(images, texts)
    return clip_loss_module().ClipLoss()(image_features, text_features, scale)


def embedding_loss(model, queries, documents):
    """One direction of ClipLoss over the rows given, rows past len(queries) extra negatives:
    its logits_per_image at world_size 1 (scale x queries @ documents.T) against
    get_ground_truth's labels, the cross-entropy ClipLoss.forward takes of each direction."""
    loss_fn = clip_loss_module().ClipLoss()
    logits, _ = loss_fn.get_logits(queries, documents, model.logit_scale.exp())
    return F.cross_entropy(logits, loss_fn.get_ground_truth(queries.device, len(queries)))


def clip_step(model, optimizer, microbatches, adapter, times_world_size=False, **switches):
    """One update as open_clip_train's loop makes it: the model in DistributedDataParallel,
    ClipLoss(**switches, rank, world_size) over the rank's pairs, backward, step. With
    times_world_size the loss is multiplied by P first (tevatron's compensation)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    loss_fn = clip_loss_module().ClipLoss(rank=rank, world_size=world_size, **switches)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer.zero_grad()
    images = torch.cat([mb["images"] for mb in microbatches])
    texts = torch.cat([mb["texts"] for mb in microbatches])
    loss = loss_fn(*ddp(images, texts))
    (loss * world_size if times_world_size else loss).backward()
    optimizer.step()
    _record(adapter, loss_fn, ddp, len(images), times_world_size)


def _record(adapter, loss_fn, ddp, pairs, times_world_size):
    """This rank's evidence that OpenCLIP's ClipLoss made the loss (one JSON line) in
    $PCL_FRAMEWORK_RECORD, when that is set."""
    path = os.environ.get(RECORD_ENV)
    if not path:
        return
    line = {
        "adapter": adapter,
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "loss_class": f"{type(loss_fn).__module__}.{type(loss_fn).__qualname__}",
        "loss_file": sys.modules[LOSS_MODULE].__file__,
        "local_loss": loss_fn.local_loss,
        "gather_with_grad": loss_fn.gather_with_grad,
        "loss_world_size": loss_fn.world_size,
        "times_world_size": times_world_size,
        "wrapped_in": type(ddp).__name__,
        "pairs": pairs,
        "open_clip_imported": "open_clip" in sys.modules,
        "torchvision_imported": "torchvision" in sys.modules,
    }
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
