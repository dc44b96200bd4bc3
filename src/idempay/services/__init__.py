"""Use cases. Each step is one transaction; the ports are passed in, never built here."""
