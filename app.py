"""Parallel Correctness Lab: navigation and the shared sidebar - nothing else.

Each page renders the language switch through `ui.page.header` (see why there).

Run: streamlit run app.py
"""

import os

import streamlit as st

from runners import warm_pool
from ui import preload
from ui.page import link_notice, t

# One intra-op thread per torch computation: the pages' tensors are tiny, and on a small
# shared box (2 cores, several visitors) extra threads only contend - measured 25x slower.
# Set before any page imports torch, which reads it once.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# With PCL_WARM_POOL=1 the server keeps pre-imported processes to fork ranks from; starting
# the first one in the background now means the first real run does not wait for it.
warm_pool.prestart()

st.set_page_config(page_title="Parallel Correctness Lab", page_icon=":material/balance:", layout="wide")

# (file, url path, catalogue key of the title, icon). url paths stay English in both
# languages so a shared deep link opens the same page for everyone.
PAGES = [
    ("sections/home.py", "home", "home.nav", ":material/home:"),
    ("sections/01_denominator.py", "denominator", "denominator.nav", ":material/functions:"),
    ("sections/02_ledger.py", "ledger", "ledger.nav", ":material/balance:"),
    ("sections/03_framework.py", "framework", "framework.nav", ":material/account_tree:"),
    ("sections/04_limits.py", "limits", "limits.nav", ":material/rule:"),
    ("sections/05_negatives.py", "negatives", "negatives.nav", ":material/hub:"),
    ("sections/06_parameters.py", "parameters", "parameters.nav", ":material/tune:"),
    ("sections/experiment.py", "experiment", "experiment.nav", ":material/model_training:"),
    ("sections/07_validation.py", "validation", "validation.nav", ":material/fact_check:"),
    ("sections/08_clipping.py", "clipping", "clipping.nav", ":material/content_cut:"),
    ("sections/09_coordinated_step.py", "coordinated-step", "step.nav", ":material/sync_lock:"),
    ("sections/sources.py", "sources", "sources.nav", ":material/menu_book:"),
]

navigation = st.navigation(
    [
        st.Page(
            path,
            title=t(title_key),
            icon=icon,
            url_path=None if url == "home" else url,
            default=(url == "home"),
        )
        for path, url, title_key, icon in PAGES
    ]
)
st.sidebar.caption(t("common.sidebar_note"))
navigation.run()
link_notice()  # a shared link's unusable values, named (a workshop gate calls it before stopping)
# After the page: torch, pandas and altair load while the visitor reads it (ui/preload.py).
preload.start()
