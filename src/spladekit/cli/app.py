"""The typer application every command module registers on."""

import typer

app = typer.Typer(
    name="spladekit",
    help="SPLADE from any MLM encoder: diagnose and rescale the head, train, encode, index, search, evaluate.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def fail(exc: Exception) -> None:
    """Print ``error: <exc>`` in red on stderr and exit with status 2 (every command's error path)."""
    typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=2)
