"""10 Across updates: the windows of an epoch and its tail, the learning-rate schedule across
the run, and a real two-process run of a whole loop judged update by update (the seed's
protocol step 4 and its "incomplete tail window")."""

from typing import Final

import streamlit as st

from pclab.core import schedules, windows
from pclab.ui import across_inputs as inputs
from pclab.ui import across_run as run
from pclab.ui import across_views as views
from pclab.ui import deeplink
from pclab.ui.exercise import predict_number
from pclab.ui.figures import magnitude
from pclab.ui.input_errors import guard
from pclab.ui.language import page_link, t
from pclab.ui.page_header import header
from pclab.ui.run_panel import run_section
from pclab.ui.show_code import show_code

URL: Final = "query-params"
PREPARED_UPDATES, PREPARED_LENGTH = 10, 100  # the second exercise: 10 updates of a 100-step run

header("across")
st.subheader(t("across.windows.title"))
st.markdown(t("across.windows.body"))
c1, c2, c3 = st.columns(3)
world_size = c1.number_input(t("across.world_size"), 1, 8, 2, key="acr_world_size", bind=URL)
microbatches = c2.number_input(
    t("across.microbatches"), 1, inputs.MAX_MICROBATCHES, 5, key="acr_microbatches", bind=URL
)
accum = c3.number_input(t("across.accum"), 1, 8, 2, key="acr_accum", bind=URL)
st.caption(t("across.windows.table_help"))
frame = inputs.counts_table(world_size, microbatches)

counts = None
with guard(inputs.headers(microbatches) | {"counts": t("across.windows.table_name")}):
    counts = inputs.counts_of(frame, microbatches)
    per_window = windows.epoch_updates(counts, accum, "accum_steps")  # every cell checked
    views.windows_grid(counts, accum)
    question = t("across.exercise_tail", microbatches=microbatches, accum=accum)
    # Gate only this block: the schedule and the run below have their own.
    if predict_number(
        "acr_tail_ex",
        question,
        per_window[-1].ratio,
        t("across.exercise_tail_why"),
        scenario=(counts, accum),
        show=magnitude,
    ):
        st.markdown(f"**{t('across.weights.title')}**")
        st.caption(t("across.weights.caption"))
        views.weights_chart(counts, accum)
        views.tail_figure(counts, accum)
        views.weights_table(counts, accum)

st.subheader(t("across.schedule.title"))
st.markdown(t("across.schedule.body"))
s1, s2 = st.columns(2)
epochs = s1.number_input(t("across.schedule.epochs"), 1, 50, 4, key="acr_epochs", bind=URL)
warmup = s2.number_input(t("across.schedule.warmup"), 0, 100, 2, key="acr_warmup", bind=URL)
empty_second = st.toggle(t("across.schedule.empty_second"), True, key="acr_empty", bind=URL)
if counts is not None:
    with guard({"epochs": t("across.schedule.epochs"), "warmup": t("across.schedule.warmup")}):
        skipped = inputs.skipped_windows(counts, accum, epochs, empty_second)
        shape = schedules.RunShape(microbatches, accum, epochs, world_size, skipped)
        st.caption(t("across.schedule.shape", updates=len(shape.windows()) - len(skipped)))
        along = views.schedule_used(world_size, "prepared", PREPARED_UPDATES, PREPARED_LENGTH)
        question = t(
            "across.exercise_prepared",
            world_size=world_size,
            updates=PREPARED_UPDATES,
            length=PREPARED_LENGTH,
        )
        why = t("across.exercise_prepared_why", world_size=world_size)
        if predict_number(
            "acr_prepared_ex", question, along, why, scenario=world_size, show=magnitude
        ):
            views.schedule_chart(shape, warmup)
            views.ends_table(shape, warmup)

st.subheader(t("across.run.title"))
st.markdown(t("across.run.body"))
# Labels fixed at this render: a format_func that translated on each call would answer in
# whatever language the calling thread reads (AppTest formats a radio's value in its own).
loops = {code: t(f"across.run.loops.{code}") for code in run.LOOPS}
loop = deeplink.choice(
    st.radio,
    t("across.run.loop"),
    tuple(loops),
    key="acr_loop",
    default="divide_by_k",
    format_func=loops.__getitem__,
)
with guard():
    params = run.params(loop)
    with st.expander(t("across.run.code", file=f"{run.LOOPS[loop]}.py"), icon=":material/code:"):
        st.code(open(params["trainer"], encoding="utf-8").read(), language="python")
    run_section(
        "trainer_check",
        params,
        show=lambda result: run.results(result.report, loop),
        key="acr_run",
        button=t("across.run.button"),
        label=t("across.run.label", loop=loops[loop]),
        primary=True,
    )
page_link(
    "pclab/sections/check_trainer.py", label=t("across.check_link"), icon=":material/troubleshoot:"
)

show_code(
    windows.epoch_windows,
    windows.epoch_updates,
    windows._weight_sum,
    schedules.rate,
    schedules.lr_trajectory,
)
