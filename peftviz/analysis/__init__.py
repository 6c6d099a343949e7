"""What the app pages compute from runs: one module per page, no Streamlit, no plotting."""
