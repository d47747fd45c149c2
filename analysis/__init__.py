"""inference-anatomy's analysis: parse raw/, derive theory, reconcile, chart, find."""
