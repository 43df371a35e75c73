"""The Learn tab's experiments, as pure functions (no Gradio, no Plotly)."""
