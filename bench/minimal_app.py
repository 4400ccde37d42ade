"""The floor for the cold-start benchmark: a Streamlit app that only writes a title.

Started exactly like app.py (`streamlit run bench/minimal_app.py`), it shows how much of the
lab's cold start is Streamlit's own server start and browser bundle, not the lab's code.
"""

import streamlit as st

st.title("Parallel Correctness Lab")
