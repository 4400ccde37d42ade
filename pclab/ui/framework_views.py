"""Page 03's protocol, step by step: how the chosen collective, loss input and accumulation
divisor carry the counts into the applied gradient (core.framework's figures)."""

from __future__ import annotations

import streamlit as st

from pclab.core import ledger
from pclab.core.framework import FrameworkUpdate
from pclab.ui import i18n
from pclab.ui.figures import fmt
from pclab.ui.language import lang, t


def protocol_steps(update: FrameworkUpdate, counts, collective: str, divide_by_accum: bool) -> None:
    """The four protocol lines for this update (why it differs, when it does)."""
    replicas, steps = len(counts), len(counts[0])
    st.subheader(t("framework.protocol_title"))
    scale = ledger.local_loss_scale(counts, collective)
    st.markdown(t("framework.step_count", n=update.num_valid_labels, p=replicas, k=steps))
    why = []
    if divide_by_accum and steps > 1:
        why.append(t("framework.why_double", k=steps))
    if update.regulariser_multiplier != 1:
        why.append(t("framework.why_reg", m=update.regulariser_multiplier))
    if why:
        st.markdown(t("framework.step_backward_bad", why=i18n.join(lang(), why, "clauses")))
    else:
        st.markdown(t("framework.step_backward", scale=fmt(scale)))
    how = t(f"framework.collective_{collective}")
    st.markdown(t("framework.step_normalise", collective=how, grad=fmt(update.token_gradient)))
    applied, reference = fmt(update.applied_gradient), fmt(update.reference_gradient)
    st.markdown(t("framework.step_update", applied=applied, reference=reference))
