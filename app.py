"""peftviz. Run with: streamlit run app.py

The entry point only lists the pages; each page in pages/ is a short script over peftviz.
"""

import streamlit as st

PAGES = [
    st.Page("pages/0_Home.py", title="Home", url_path="home", default=True),
    st.Page("pages/6_Tour.py", title="Tour", url_path="Tour"),  # the presenter's view of the other pages
    st.Page("pages/1_Train.py", title="Train", url_path="Train"),
    st.Page("pages/2_Calibration.py", title="Calibration", url_path="Calibration"),
    st.Page("pages/3_Attention.py", title="Attention", url_path="Attention"),
    st.Page("pages/4_Kernel.py", title="Kernel", url_path="Kernel"),
    st.Page("pages/5_Tiny_attention_heads.py", title="Tiny-attention heads", url_path="Tiny_attention_heads"),
]
st.navigation(PAGES).run()
