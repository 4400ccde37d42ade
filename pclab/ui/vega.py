"""Altair charts as ready Vega-Lite specs: built and validated once, data in Arrow.

`st.altair_chart` validates the chart and converts its data on every draw; a page that keeps
the spec (st.cache_data) or builds it before drawing anything else passes `spec_of(chart)`
to `st.vega_lite_chart`, which draws the same chart from bytes it passes through as they are.
"""

from __future__ import annotations

import altair as alt
from streamlit import dataframe_util

# A log axis's tick labels, all in one notation: "1e-8, 1e-6", never "1e-8" beside "0.000001"
# (Vega's default switches notation along the axis).
LOG_TICKS = "~e"


def spec_of(chart: alt.TopLevelMixin) -> dict:
    """The chart's Vega-Lite spec with each dataset as Arrow bytes: `st.vega_lite_chart`
    otherwise converts a spec's data to Arrow on every draw (17 ms a grid on the
    Frameworks page)."""
    spec = chart.to_dict()
    spec["datasets"] = {
        name: dataframe_util.convert_anything_to_arrow_bytes(values)
        for name, values in spec.get("datasets", {}).items()
    }
    return spec
