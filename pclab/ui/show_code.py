"""The "show the code" expander: the source of the core functions that computed a page's
figures, so a learner reads the math that made the number."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import cache

import streamlit as st

from pclab.ui.language import t


@cache
def _source(function: Callable) -> str:
    """Read once per process: getsource re-reads and re-parses the file (~6 ms a rerun)."""
    return inspect.getsource(function)


def show_code(*functions: Callable) -> None:
    """Expander with the source of the core functions that computed this page's figures."""
    with st.expander(t("common.show_code"), icon=":material/code:"):
        for function in functions:
            st.caption(f"`{function.__module__}.{function.__qualname__}`")
            st.code(_source(function), language="python")
