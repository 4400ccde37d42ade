"""The upstream issues of the "Frameworks, measured" page's rows (ui.framework_rows): the
issues and pull requests README "Frameworks, measured" names for each finding, and, where a
framework has none of its own, another project's on the same arithmetic, cited as related.
Data only; `issue_url` alone makes a link of it.

    python -c "from pclab.ui import framework_issues as f; print(f.ISSUES['torchtitan'])"
"""

from __future__ import annotations

import re

from pclab.ui import i18n
from pclab.ui.language import lang, t
from pclab.ui.plain_text import plain

# setting code -> the upstream issues and pull requests README "Frameworks, measured" names for
# its finding, as (owner/repository, number): data, made into links by `issue_url` alone.
ISSUES = {
    "accelerate_guide_as_written": (("huggingface/accelerate", 4303),),
    "lightning_accumulate": (
        ("Lightning-AI/pytorch-lightning", 20350),
        ("Lightning-AI/pytorch-lightning", 21386),
    ),
    "hf_trainer": (("huggingface/transformers", 34191),),
    "trl_sft": (
        ("huggingface/transformers", 39395),
        ("huggingface/trl", 3538),
        ("huggingface/trl", 2604),
    ),
    "deepspeed_engine": (("allenai/open-instruct", 1728), ("allenai/open-instruct", 1736)),
    "hf_trainer_deepspeed_zero2": (
        ("huggingface/transformers", 38753),
        ("huggingface/transformers", 32049),
    ),
    "torchtitan": (("pytorch/torchtitan", 1661),),
    "clm_no_trainer_padded": (("huggingface/transformers", 34191),),
    "torchtune_full_finetune": (("meta-pytorch/torchtune", 2613),),
    "megatron_core": (("NVIDIA/Megatron-LM", 936),),
    "openclip_global_loss": (("mlfoundations/open_clip", 616), ("mlfoundations/open_clip", 894)),
    "openclip_global_gather_grad": (("mlfoundations/open_clip", 616),),
    "openclip_local_loss": (("mlfoundations/open_clip", 894),),
    "openclip_local_gather_grad": (
        ("mlfoundations/open_clip", 894),
        ("mlfoundations/open_clip", 980),
    ),
    "openclip_times_world_size": (("texttron/tevatron", 30), ("texttron/tevatron", 143)),
    "sbert_mnrl": (
        ("huggingface/sentence-transformers", 2831),
        ("huggingface/sentence-transformers", 3442),
    ),
    "sbert_mnrl_gather": (("huggingface/sentence-transformers", 3442),),
    "sbert_cached_mnrl": (
        ("huggingface/sentence-transformers", 2916),
        ("huggingface/sentence-transformers", 3442),
    ),
    "sbert_cached_mnrl_gather": (("huggingface/sentence-transformers", 3442),),
    "sbert_mnrl_accumulate": (("huggingface/sentence-transformers", 2916),),
    "sbert_mnrl_gather_accumulate": (("huggingface/sentence-transformers", 2916),),
}
# run row code (frameworks.run_table.ROWS) -> the upstream issues and pull requests behind what
# its loop does across a run: the tail divided by K, the prepared scheduler, resuming.
RUN_ISSUES = {
    "run_accelerate_accumulate": (
        ("huggingface/accelerate", 2926),
        ("huggingface/accelerate", 1013),
        ("Lightning-AI/pytorch-lightning", 19987),
    ),
    "run_lightning_accumulate": (("Lightning-AI/pytorch-lightning", 19987),),
    "run_hf_trainer": (
        ("huggingface/transformers", 38837),
        ("huggingface/transformers", 24088),
        ("huggingface/transformers", 22143),
    ),
    # the tail at an epoch's end: "DS will not automatically handle incomplete gradient
    # accumulation steps" (a maintainer, #7439); #8183: managed_gradient_accumulation=false
    "run_deepspeed_engine": (("deepspeedai/DeepSpeed", 7439), ("deepspeedai/DeepSpeed", 8183)),
    # the engine's own division by K turned off under Trainer (scale_wrt_gas=False); #45305
    # (open): a model that takes the loss kwargs but ignores num_items_in_batch is summed
    "run_hf_trainer_deepspeed_zero2": (
        ("huggingface/transformers", 35808),
        ("huggingface/transformers", 45305),
    ),
    # #24186: the resume block's completed_steps fixed; its batch count is still updates x K
    "run_clm_no_trainer": (
        ("huggingface/accelerate", 2926),
        ("Lightning-AI/pytorch-lightning", 19987),
        ("huggingface/transformers", 24186),
    ),
    # the window's running label count (#1875) is zeroed only after a step: an epoch's tail is
    # carried into the next epoch's first window
    "run_torchtune_full_finetune": (("meta-pytorch/torchtune", 1875),),
    # a rank whose labels are all -100 divides by 0: the Trainer stops on the NaN loss (open)
    "run_olmo_core_trainer": (("allenai/OLMo-core", 657),),
    # accumulation does not enlarge the in-batch negatives: a gather per microstep
    "run_sbert_trainer_mnrl_gather": (("huggingface/sentence-transformers", 2916),),
}
# setting code -> another project's issue or pull request on the same arithmetic, where no
# issue of the framework's own is known (README: "torchtitan fixed the same arithmetic").
RELATED = {
    "olmo_core_train_module": (("pytorch/torchtitan", 2206),),
    # torch.distributed.checkpoint initialises a fresh AdamW's state by a step at lr 0: the
    # step counts run one ahead (OLMo-core's pre-train checkpoint); torchtitan reset them
    "run_olmo_core_trainer": (("pytorch/torchtitan", 4382),),
}
REPOSITORY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


def issue_url(repository: str, number: int) -> str:
    """The GitHub address of an issue or pull request (GitHub sends /issues/N of a pull
    request on to it), from a repository name and a number that are checked first."""
    if not REPOSITORY.fullmatch(repository) or ".." in repository:
        raise ValueError(f"repository={repository!r} is not owner/name")
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        raise ValueError(f"number={number!r} must be a whole number >= 1")
    return f"https://github.com/{repository}/issues/{number}"


def _links(found: tuple[tuple[str, int], ...]) -> list[str]:
    return [f"[{plain(f'{r}#{n}')}]({issue_url(r, n)})" for r, n in found]


def run_issue_links(code: str) -> str | None:
    """A run row's upstream issues as one line of Markdown links (None: it has none)."""
    found = RUN_ISSUES.get(code, ())
    return t("frameworks.runs.upstream", links=i18n.join(lang(), _links(found))) if found else None


def issue_links(code: str) -> str | None:
    """The row's upstream issues as one line of Markdown links, or the related issues of
    another project when the framework has none of its own (None: the README names none)."""
    for table, key in ((ISSUES, "frameworks.issues"), (RELATED, "frameworks.related")):
        if found := table.get(code, ()):
            return t(key, links=i18n.join(lang(), _links(found)))
    return None
