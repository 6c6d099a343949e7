"""Pure functions from data to plotly figures: one module per page, testable without Streamlit."""
