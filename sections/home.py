"""Home: what the lab is, why it matters, and a workshop path through the sections."""

from pathlib import Path

import streamlit as st

from ui.page import header, t

ROOT = Path(__file__).resolve().parent.parent
header("home", share=False)
# Where to start, before the why: a learner opens 01; an instructor learns workshop mode exists.
with st.container(border=True):
    st.markdown(f"**{t('home.start_title')}**")
    st.page_link("sections/01_denominator.py", label=t("home.start_link"), icon=":material/play_arrow:")
    st.markdown(t("home.start_workshop"))
st.subheader(t("home.why_title"))
st.markdown(t("home.why_body"))

# Workshop order: (catalogue step, page file). A step whose page is not built yet is listed
# without a link rather than hidden, so instructors see the whole arc.
WORKSHOP = [
    ("denominator", "sections/01_denominator.py"),
    ("ledger", "sections/02_ledger.py"),
    ("framework", "sections/03_framework.py"),
    ("limits", "sections/04_limits.py"),
    ("negatives", "sections/05_negatives.py"),
    ("parameters", "sections/06_parameters.py"),
    ("experiment", "sections/experiment.py"),
    ("validation", "sections/07_validation.py"),
    ("clipping", "sections/08_clipping.py"),
    ("step", "sections/09_coordinated_step.py"),
]

st.subheader(t("home.path_title"))
st.caption(t("home.path_intro"))
for step, path in WORKSHOP:
    minutes, shows, ask = (t(f"home.steps.{step}.{field}") for field in ("minutes", "shows", "ask"))
    with st.container(border=True):
        left, right = st.columns([1, 4])
        left.markdown(f"**{minutes}′**")
        if (ROOT / path).exists():  # every page file on disk is registered (a test checks)
            right.page_link(path, label=f"**{t(f'{step}.nav')}**", icon=":material/arrow_forward:")
        else:
            right.markdown(f"**{t(f'home.steps.{step}.title')}** · {t('home.later')}")
        right.markdown(shows)
        right.markdown(f":material/help: {ask}")
st.caption(t("home.language_hint"))
