"""The domain: money, states, errors and ports. Pure Python, no I/O, no framework imports."""
