"""The scenarios of bench/README.md, one module each; `SCENARIOS` runs them in this order."""
