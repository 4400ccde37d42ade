"""Check a trainer: pick a bundled example trainer, read its code, predict the weight each
microbatch gets, then run the real trainer check (experiments/trainer_check) under torchrun
and read the verdicts, the measured weights and the first divergence.

The page only ever runs the bundled files the examples' index lists (examples/README.md;
ui.trainer_views.bundled_path builds the path from a fixed option code); a visitor's own file
goes through the command line, `pclab check my_trainer.py --json`, never through this page.
Three of them drive the real Hugging Face Trainer: choosing one also shows both of its
settings as measured (ui.hf_trainer_views), while transformers is imported only by the ranks
of a run. The coupled examples (ui.trainer_coupled) and the run-mode loops over epochs, some
killed and restarted too (ui.trainer_run, from examples.RUN), have views of their own.
"""

import streamlit as st

from pclab.core import update_weights
from pclab.experiments.trainer_check import scenarios
from pclab.ui import deeplink
from pclab.ui import hf_trainer_views as hf_views
from pclab.ui import trainer_coupled as coupled
from pclab.ui import trainer_run as run_mode
from pclab.ui import trainer_verdict as verdict
from pclab.ui import trainer_views as views
from pclab.ui.exercise import predict_choice
from pclab.ui.input_errors import guard
from pclab.ui.language import t
from pclab.ui.page_header import header
from pclab.ui.run_panel import run_section
from pclab.ui.show_code import show_code

header("check")
names = {code: t(f"check.example.{code}") for code in views.EXAMPLES}  # this render's language
names |= coupled.names()  # issue 28: the coupled examples, after the token ones
names |= run_mode.names()  # issue 41: the run-mode loops (examples.RUN), after those
example = deeplink.choice(
    st.selectbox,
    t("check.controls.example"),
    tuple(names),
    key="chk_example",
    default="correct_manual",
    format_func=names.__getitem__,
    accept_new_options=False,  # a visitor picks a bundled file; nothing typed is ever a path
)
left, right = st.columns(2)
world_size = left.segmented_control(
    t("check.controls.world_size"),
    views.WORLD_SIZES,
    default=2,
    required=True,
    key="chk_world_size",
    bind="query-params",
)
accum = right.segmented_control(
    t("check.controls.accum"),
    views.ACCUM_STEPS,
    default=2,
    required=True,
    key="chk_accum",
    bind="query-params",
)

if example in coupled.COUPLED_EXAMPLES:  # issue 28: a coupled trainer has a view of its own
    coupled.section(example, world_size, accum)
    st.stop()
if example in run_mode.RUN_EXAMPLES:  # issue 41: a loop over epochs, judged update by update
    run_mode.section(example, world_size, accum)
    st.stop()

with guard():
    path = views.bundled_path(example)
    views.example_code(example, hf_views.installed())

    st.subheader(t("check.predict.heading"))
    grids, _ = scenarios.scenario_counts(world_size, accum, views.capacity(example))
    counts = grids["uneven"]
    rows = " · ".join(
        t("check.predict.row", rank=r, counts=" + ".join(map(str, row)))
        for r, row in enumerate(counts)
    )
    st.markdown(t("check.predict.body", world_size=world_size, accum=accum, counts=rows))
    if views.shift_drops_labels(example):
        st.caption(t("check.predict.shift"))
    views.predicted_maps(counts)

    question = t("check.exercise", example=names[example])
    answer, why = views.EXAMPLES[example], t(f"check.answer.{example}")
    schemes = {s: views.scheme_name(s) for s in update_weights.NAMED_SCHEMES}
    revealed = predict_choice(
        "chk_ex", question, tuple(schemes), answer, why, schemes.__getitem__, scenario=example
    )
    if revealed:  # in workshop mode the run waits for the reveal
        st.subheader(t("check.run.heading"))
        st.markdown(t("check.run.body"))
        params = {"trainer": str(path), "world_size": world_size, "accum": accum}
        run_section(
            "trainer_check",
            params,
            show=lambda result: verdict.run_results(result.report, example),
            key="chk_run",
            button=t("check.run.button"),
            label=t(
                "check.run.label",
                example=names[example],
                world_size=world_size,
                accum=accum,
            ),
            primary=True,
        )
        if example in views.HF_EXAMPLES:  # the recorded run of both settings, side by side
            hf_views.measured()

views.own_trainer()
show_code(
    update_weights.scheme_weights_times_n,
    update_weights.solve_weights,
    update_weights.matching_schemes,
)
