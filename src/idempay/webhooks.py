"""The webhook sender over httpx (the port lives in services/outbox.py)."""

from __future__ import annotations

import httpx


class HttpxWebhookSender:
    def __init__(self, timeout_s: float = 10.0) -> None:
        self.client = httpx.AsyncClient(timeout=timeout_s, follow_redirects=False)

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> int:
        response = await self.client.post(url, content=body, headers=headers)
        return response.status_code

    async def aclose(self) -> None:
        await self.client.aclose()
