"""docs/api.md's curl session works as printed (against a server whose `simbank` channel is the
scripted stand-in, and on its port)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.e2e.server import Server

DOC = Path(__file__).parents[2] / "docs" / "api.md"


def curl_session() -> str:
    text = DOC.read_text()
    match = re.search(r"<!-- curl-session[^>]*-->\n```sh\n(.*?)```", text, re.S)
    assert match, "docs/api.md lost its curl session"
    return match.group(1)


def test_the_curl_session_of_docs_api_md_creates_a_merchant_pays_and_queries(
    server: Server,
) -> None:
    script = curl_session()
    assert len(script.strip().splitlines()) == 3
    env = {
        **os.environ,
        "IDEMPAY_DATABASE_URL": server.database_url,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script.replace("http://127.0.0.1:8000", server.url)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    paid, queried = (json.loads(line) for line in run.stdout.splitlines())
    assert (paid["status"], paid["amount"], paid["channel"]) == ("SUCCESS", 19900, "simbank")
    assert queried == paid
