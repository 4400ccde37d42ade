"""The lab's pages, written once: app.py registers them, the home page lays out the workshop
path from them, and the tests read them (never by parsing app.py).

    python -c "from pclab.ui.pages import PAGES; print([p.url for p in PAGES])"
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Page:
    file: str  # relative to the project root
    url: str  # stays English in both languages, so a shared deep link opens the same page
    key: str  # catalogue prefix: "<key>.nav" is its title, "home.steps.<key>" its workshop step
    icon: str
    workshop: bool = True  # a step of the home page's workshop path

    @property
    def title_key(self) -> str:
        return f"{self.key}.nav"


PAGES = (
    Page("pclab/sections/home.py", "home", "home", ":material/home:", workshop=False),
    Page("pclab/sections/01_denominator.py", "denominator", "denominator", ":material/functions:"),
    Page("pclab/sections/02_ledger.py", "ledger", "ledger", ":material/balance:"),
    Page("pclab/sections/03_framework.py", "framework", "framework", ":material/account_tree:"),
    Page("pclab/sections/04_limits.py", "limits", "limits", ":material/rule:"),
    Page("pclab/sections/05_negatives.py", "negatives", "negatives", ":material/hub:"),
    Page("pclab/sections/06_parameters.py", "parameters", "parameters", ":material/tune:"),
    Page("pclab/sections/experiment.py", "experiment", "experiment", ":material/model_training:"),
    Page("pclab/sections/07_validation.py", "validation", "validation", ":material/fact_check:"),
    Page("pclab/sections/08_clipping.py", "clipping", "clipping", ":material/content_cut:"),
    Page(
        "pclab/sections/09_coordinated_step.py", "coordinated-step", "step", ":material/sync_lock:"
    ),
    Page("pclab/sections/10_across_updates.py", "across-updates", "across", ":material/timeline:"),
    Page("pclab/sections/check_trainer.py", "check-trainer", "check", ":material/troubleshoot:"),
    Page(
        "pclab/sections/frameworks.py",
        "frameworks",
        "frameworks",
        ":material/table_chart:",
        workshop=False,
    ),
    Page("pclab/sections/sources.py", "sources", "sources", ":material/menu_book:", workshop=False),
)
HOME = PAGES[0]
WORKSHOP = tuple(page for page in PAGES if page.workshop)
