"""peftviz. Run with: streamlit run app.py

The entry point only lists the pages; each page in pages/ is a short script over peftviz.
Home is served at "/" and at "/home": Streamlit's older folder mode, which may resolve a server's
first request (see `appkit.leave_folder_navigation`), finds "/home" by the file name 0_home.py,
and the hidden page below finds it afterwards. The default page's own path only has to differ.
"""

import streamlit as st

from peftviz.app import jobpanel

if jobpanel.policy().shared:  # a page's bug shows its kind, never a traceback naming the server's files
    st.set_option("client.showErrorDetails", "type")

PAGES = [
    st.Page("pages/0_home.py", title="Home", url_path="start", default=True),  # served at "/"
    st.Page("pages/6_Tour.py", title="Tour", url_path="Tour"),  # the presenter's view of the other pages
    st.Page("pages/1_Train.py", title="Train", url_path="Train"),
    st.Page("pages/2_Calibration.py", title="Calibration", url_path="Calibration"),
    st.Page("pages/7_Confidence.py", title="Confidence", url_path="Confidence"),
    st.Page("pages/8_What_fixes_it.py", title="What fixes it", url_path="What_fixes_it"),
    st.Page("pages/9_Under_shift.py", title="Under shift", url_path="Under_shift"),
    st.Page("pages/3_Attention.py", title="Attention", url_path="Attention"),
    st.Page("pages/4_Kernel.py", title="Kernel", url_path="Kernel"),
    st.Page("pages/5_Tiny_attention_heads.py", title="Tiny-attention heads", url_path="Tiny_attention_heads"),
    st.Page("pages/0_home.py", title="Home", url_path="home", visibility="hidden"),  # "/home" too
]
st.navigation(PAGES).run()
