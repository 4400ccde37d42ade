"""Parallel Correctness Lab: navigation and the shared sidebar - nothing else.

Each page renders the language switch through `ui.page_header.header` (see why in
`ui.language.language_switch`).

Run: streamlit run app.py
"""

import streamlit as st

from pclab.paths import PACKAGE_DIR
from pclab.ui import preload, serving
from pclab.ui.language import t
from pclab.ui.link_notice import link_notice
from pclab.ui.not_found import unknown_path_page
from pclab.ui.pages import HOME, PAGES

# One intra-op thread per torch computation, set before any page imports torch.
serving.single_thread_torch()

# The server forks real runs' ranks from pre-imported processes (the warm pool) unless
# PCL_WARM_POOL=0; the first one starts in the background now (under `pclab serve` it started
# with the server: ui/warm_start.py), importing every registered experiment's rank-side code
# ahead, so the first real run does not wait for it.
serving.started()
FAVICON = str(PACKAGE_DIR / "ui" / "favicon.svg")

# The favicon is the lab's own file, inlined as a data: URL: a ":material/...:" one would have
# every visitor's browser fetch it from Google's font CDN (tests/e2e/test_hostile_links.py).
st.set_page_config(page_title="Parallel Correctness Lab", page_icon=FAVICON, layout="wide")

pages = [
    st.Page(
        page.file,
        title=t(page.title_key),
        icon=page.icon,
        # The home page's pathname is "" outright, not inferred from its file ("home"): it is
        # served at the root either way, and a typed /home can then reach the page below.
        url_path="" if page is HOME else page.url,
        default=page is HOME,
    )
    for page in PAGES
]
# An address that is no page (/nope, a stale link) gets a hidden page of its own, in the
# reader's language, instead of Streamlit's English "Page not found" dialog (ui/not_found.py).
unknown = unknown_path_page(page.url for page in PAGES if page is not HOME)
navigation = st.navigation(
    pages + ([unknown] if unknown else []),
    expanded=True,  # every page listed: a "View more" fold would hide the workshop's last steps
)
st.sidebar.caption(t("common.sidebar_note"))
navigation.run()
link_notice()  # a shared link's unusable values, named (a workshop gate calls it before stopping)
# After the page: torch, pandas and altair load while the visitor reads it (ui/preload.py).
preload.start()
