"""peftviz home page. Run with: streamlit run app.py"""

import streamlit as st

from peftviz.methods import describe_methods

st.set_page_config(page_title="peftviz", layout="wide")
st.title("peftviz")
st.markdown(
    "peftviz shows how parameter-efficient tuning changes a transformer text classifier. "
    "It trains, or loads from `cache/`, classifiers tuned with prefix-tuning, prefix-propagation "
    "(and its kernel form), the tiny-attention adapter, and full fine-tuning. "
    "Then it shows how well calibrated each one is, epoch by epoch, and where its attention goes."
)
st.subheader("Methods")
st.dataframe(describe_methods(), hide_index=True, width="stretch")
st.caption("The encoder is the offline MiniLM (sentence-transformers/all-MiniLM-L6-v2) unless you pick another.")
