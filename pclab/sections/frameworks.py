"""Frameworks, measured: the trainer check on the trainers people use (Accelerate, Lightning,
transformers' Trainer, TRL, DeepSpeed, FSDP2, litgpt, torchtitan, OpenCLIP,
sentence-transformers), one row per setting, from the recorded table
pclab/artifacts/framework_checks.json
(`python -m pclab.experiments.trainer_check.frameworks`). Each row's verdict, measured scheme
and weight x N grid of the uneven scenario (a coupled row: its objective, factors and
residual instead of the grid); a row whose framework is installed here runs live
(ui.framework_rows), the others say which versions recorded them and why they cannot run.

The page only ever runs the bundled adapters in examples/frameworks/, by their fixed codes.
"""

import streamlit as st

from pclab.core import update_weights
from pclab.experiments.trainer_check import frameworks
from pclab.ui import framework_rows as rows
from pclab.ui import framework_runs
from pclab.ui.language import page_link, t
from pclab.ui.page_header import header
from pclab.ui.show_code import show_code

header("frameworks", share=False)
st.markdown(t("frameworks.how", world_size=frameworks.WORLD_SIZE, accum=frameworks.ACCUM))
st.caption(t("check.results.weights_caption"))
check_page = "pclab/sections/check_trainer.py"
page_link(check_page, label=t("frameworks.to_check"), icon=":material/troubleshoot:")

table = rows.records()
shown = []
for framework in dict.fromkeys(setting.framework for setting, _ in table):
    st.subheader(framework)
    for setting, record in table:
        if setting.framework == framework:
            shown.append((setting, rows.row(setting, record)))

st.subheader(t("frameworks.table_heading"))
rows.summary(shown)
framework_runs.section()
show_code(frameworks.measured, update_weights.scheme_weights_times_n)
