"""Numbers about runs: theory, measured metrics, predictions, hardware, self-checks."""
