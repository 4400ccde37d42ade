"""Parallel Correctness Lab: is a data-parallel, gradient-accumulated step still the same
update as the single-process one?

    pclab check my_trainer.py --json          # your trainer against the reference
    pclab run negatives --json                 # one of the lab's real experiments
    streamlit run app.py                       # the lab itself (from a checkout, extra [app])

Subpackages: `core` (pure math), `runners` (torchrun / warm-pool launches), `experiments`
(one package each, listed in `experiments.registry`), and the app's `ui` and `sections`.
"""

__version__ = "0.2.0"
