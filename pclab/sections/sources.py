"""Sources: the primary references the explanations rest on, one line each."""

import pandas as pd
import streamlit as st

from pclab.ui import downloads, i18n
from pclab.ui.language import lang, t
from pclab.ui.page_header import header

header("sources", share=False)

# (catalogue key, address, pages that rely on it). The line of text for each source is in
# the catalogue, written for this lab; the addresses are the primary documents themselves.
SOURCES = [
    ("ddp", "https://pytorch.org/docs/stable/notes/ddp.html", "02, 03, 06, experiment"),
    ("all_gather", "https://pytorch.org/docs/stable/distributed.html", "05, 06"),
    (
        "clip_grad_norm",
        "https://pytorch.org/docs/stable/generated/torch.nn.utils.clip_grad_norm_.html",
        "08",
    ),
    ("fsdp_clip", "https://pytorch.org/docs/stable/fsdp.html", "08"),
    ("grad_scaler", "https://pytorch.org/docs/stable/amp.html#gradient-scaling", "09"),
    (
        "sharded_grad_scaler",
        "https://github.com/pytorch/pytorch/blob/main/torch/distributed/fsdp/sharded_grad_scaler.py",
        "09",
    ),
    ("torchtitan", "https://github.com/pytorch/torchtitan/pull/2206", "01, 03, experiment"),
    ("hf_accumulation", "https://huggingface.co/blog/gradient_accumulation", "01, 02, experiment"),
    ("torchtune", "https://github.com/meta-pytorch/torchtune/pull/1875", "01, 03"),
    ("gradcache", "https://arxiv.org/abs/2101.06983", "04, 05"),
    (
        "open_clip",
        "https://github.com/mlfoundations/open_clip/blob/main/src/open_clip/loss.py",
        "05, 06",
    ),
    (
        "distributed_sampler",
        "https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler",
        "07",
    ),
    ("lightning_tail", "https://github.com/Lightning-AI/pytorch-lightning/issues/19987", "10"),
    ("nanogpt_tail", "https://github.com/karpathy/nanoGPT/issues/605", "10"),
    ("anima_tail", "https://github.com/WalkingMeatAxolotl/AnimaLoraStudio/pull/305", "10"),
    ("accelerate_scheduler", "https://github.com/huggingface/accelerate/issues/2926", "10"),
    ("transformers_scheduler", "https://github.com/huggingface/transformers/pull/24088", "10"),
    ("seed_protocol", None, "10"),  # the seed page itself: no address of its own
]


def pages_of(pages: str) -> str:
    """The pages a source is used on, listed the reader's way ("02、03、实验" in Chinese)."""
    names = [t("sources.experiment") if p == "experiment" else p for p in pages.split(", ")]
    return i18n.join(lang(), names)


for key, url, pages in SOURCES:
    with st.container(border=True):
        used_on = t("sources.used_on", pages=pages_of(pages))
        name = t(f"sources.items.{key}.name")
        st.markdown(f"**[{name}]({url})** · {used_on}" if url else f"**{name}** · {used_on}")
        st.markdown(t(f"sources.items.{key}.establishes"))

frame = pd.DataFrame(
    [
        {
            "source": t(f"sources.items.{key}.name"),
            "address": url,
            "establishes": t(f"sources.items.{key}.establishes"),
            "pages": pages_of(pages),
        }
        for key, url, pages in SOURCES
    ]
)
labels = {c: t(f"sources.col.{c}") for c in frame.columns}  # headers in the page's language
with st.expander(t("sources.as_table")):
    config = labels | {"address": st.column_config.LinkColumn(labels["address"])}
    downloads.table(frame, "sources", hide_index=True, column_config=config)
