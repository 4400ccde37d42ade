"""Home: what the lab is, why it matters, and a workshop path through the sections."""

import streamlit as st

from pclab.ui.language import page_link, t
from pclab.ui.page_header import header
from pclab.ui.pages import WORKSHOP
from pclab.ui.trainer_examples import EXAMPLES

header("home", share=False)
# Where to start, before the why: a learner opens 01; an instructor learns workshop mode exists.
with st.container(border=True):
    st.markdown(f"**{t('home.start_title')}**")
    page_link(
        "pclab/sections/01_denominator.py", label=t("home.start_link"), icon=":material/play_arrow:"
    )
    st.markdown(t("home.start_workshop"))
st.subheader(t("home.why_title"))
st.markdown(t("home.why_body"))

st.subheader(t("home.path_title"))
st.caption(t("home.path_intro"))
for page in WORKSHOP:  # in the order of the navigation
    step = page.key
    fields = ("minutes", "shows", "ask")  # the check step counts its bundled examples
    minutes, shows, ask = (t(f"home.steps.{step}.{f}", examples=len(EXAMPLES)) for f in fields)
    with st.container(border=True):
        left, right = st.columns([1, 4])
        left.markdown(f"**{minutes}′**")
        page_link(
            page.file,
            label=f"**{t(page.title_key)}**",
            icon=":material/arrow_forward:",
            where=right,
        )
        right.markdown(shows)
        right.markdown(f":material/help: {ask}")
st.caption(t("home.language_hint"))
