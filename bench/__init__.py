"""idempay's benchmarks: every figure measured next to a baseline run in the same invocation, on
the same machine (`python -m bench`; see bench/README.md)."""
