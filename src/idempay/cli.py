"""The command line of API.md: serve, worker, simbank, merchant, operator, migrate, demo."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer
import uvloop

from idempay import bootstrap, logs
from idempay.config import ConfigError, Settings

app = typer.Typer(
    help="idempay: charge each payment intent at most once; always find out how it ended.",
    no_args_is_help=True,
    add_completion=False,
)
merchant_app = typer.Typer(help="Manage merchants.", no_args_is_help=True)
operator_app = typer.Typer(help="Manage operators (keys for /v1/ops/*).", no_args_is_help=True)
app.add_typer(merchant_app, name="merchant")
app.add_typer(operator_app, name="operator")


def _settings() -> Settings:
    try:
        settings = Settings.from_env()
    except ConfigError as e:
        typer.echo(f"configuration error: {e}", err=True)
        raise typer.Exit(2) from None
    logs.configure(settings.log_format)
    return settings


async def _create(name: str, operator: bool) -> dict[str, str]:
    container = await bootstrap.build(_settings(), channels={})
    try:
        pid, key = await bootstrap.create_principal(container.store, name, operator=operator)
    finally:
        await container.aclose()
    return {"operator_id" if operator else "merchant_id": pid, "api_key": key}


@merchant_app.command("create")
def merchant_create(
    name: Annotated[str, typer.Argument(help="The merchant's display name.")],
) -> None:
    """Create a merchant; print {"merchant_id", "api_key"} (the key is shown only this once)."""
    typer.echo(json.dumps(asyncio.run(_create(name, operator=False))))


@operator_app.command("create")
def operator_create(
    name: Annotated[str, typer.Argument(help="The operator's display name.")],
) -> None:
    """Create an operator; print {"operator_id", "api_key"} (the key is shown only this once)."""
    typer.echo(json.dumps(asyncio.run(_create(name, operator=True))))


@app.command()
def migrate() -> None:
    """Create or upgrade the schema of IDEMPAY_DATABASE_URL."""

    async def run() -> None:
        container = await bootstrap.build(_settings(), channels={})
        await container.aclose()

    asyncio.run(run())
    typer.echo("schema is up to date", err=True)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
) -> None:
    """Run the HTTP API (creates or upgrades the schema on start)."""
    from idempay.api.server import run

    run(_settings(), host=host, port=port)


@app.command()
def worker(
    once: Annotated[
        bool, typer.Option("--once", help="Run every job that is due now, then exit.")
    ] = False,
) -> None:
    """Resolve UNKNOWN and stale instructions by query, open review items, deliver webhooks."""
    from idempay import worker as worker_loop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:  # as serve does
        runner.run(worker_loop.main(_settings(), once=once))


@app.command()
def simbank(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8765,
) -> None:
    """Run the channel simulator (state: SIMBANK_DATABASE; callbacks signed: SIMBANK_SECRET)."""
    from idempay.simbank.server import run

    logs.configure(Settings.from_env().log_format)
    run(host=host, port=port)


@app.command()
def reconcile(
    channel: Annotated[str, typer.Option(help="The channel, as named in IDEMPAY_CHANNELS.")],
    day: Annotated[str, typer.Option("--date", help="The UTC day, YYYY-MM-DD.")],
) -> None:
    """Reconcile one channel's statement of one UTC day against the books; print a summary.
    Safe to run again: no correction is repeated and no finding recorded twice."""
    from datetime import date as date_

    from rich.console import Console
    from rich.table import Table

    try:
        when = date_.fromisoformat(day)
    except ValueError:
        typer.echo(f"--date must be YYYY-MM-DD, got {day!r}", err=True)
        raise typer.Exit(2) from None

    async def run() -> dict[str, object]:
        container = await bootstrap.build(_settings())
        try:
            if channel not in container.channels:
                typer.echo(f"unknown channel {channel!r}", err=True)
                raise typer.Exit(2)
            run_id = await container.reconciliation.start(channel, when)
            assert run_id is not None
            return await container.reconciliation.run(run_id, channel, when)
        finally:
            await container.aclose()

    result = asyncio.run(run())
    console = Console()
    counts = Table(title=f"reconciliation {result['id']}: {channel} {day} — {result['status']}")
    counts.add_column("class")
    counts.add_column("lines", justify="right")
    for cls, n in dict(result["counts"]).items():  # type: ignore[call-overload]
        counts.add_row(cls, str(n))
    console.print(counts)
    found = list(result["discrepancies"])  # type: ignore[call-overload]
    if found:
        detail = Table(title="discrepancies")
        for col in ("class", "request_id", "kind", "correction"):
            detail.add_column(col)
        for d in found:
            detail.add_row(d["class"], str(d["request_id"]), str(d["kind"]), d["correction"])
        console.print(detail)
    if result["status"] != "DONE":
        typer.echo(f"reconciliation failed: {result['error']}", err=True)
        raise typer.Exit(1)


@app.command()
def demo(
    payments: Annotated[int, typer.Option(min=1, max=100_000, help="How many payments.")] = 500,
    seed: Annotated[int, typer.Option(help="Seed of the amounts and the simulator's faults.")] = 7,
    concurrency: Annotated[int, typer.Option(min=1, max=512, help="Concurrent clients.")] = 32,
    folder: Annotated[
        Path | None, typer.Option(help="Keep databases and logs here (default: a temp folder).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """The whole system on SQLite under faults (half-open, timeouts, 5xx, duplicated and lost
    callbacks, a channel whose idempotency failed), `serve` killed mid-run, next to two naive
    clients retrying against the same faults. Exits 1 if idempay double-charged or disagrees
    with the bank."""
    from idempay.demo.main import main as run_demo

    logs.configure("json")
    raise typer.Exit(run_demo(payments, seed, concurrency, folder, as_json))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
