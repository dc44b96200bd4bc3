"""The HTTP API of API.md (FastAPI): the only package that knows HTTP."""
