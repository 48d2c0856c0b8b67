"""The typer application every command module registers on."""

import typer
from typer.core import TyperGroup


class HelpGroup(TyperGroup):
    """The command group, its help in click's plain layout (``rich_markup_mode=None`` on :data:`app`):
    each option on its line, its help wrapped beside it from column 34 on or, for a longer option
    name, below it, so that no name is cut and the help keeps most of an 80-column terminal (rich's
    option table gives the help column what its widest name leaves, 20 characters at 80 columns,
    and cuts the names it cannot fit). The command list shows each command's whole first sentence,
    wrapped (click's default cuts it to one line with ``...``)."""

    def format_commands(self, ctx, formatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=1_000_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


app = typer.Typer(
    name="spladekit",
    cls=HelpGroup,
    help="SPLADE from any MLM encoder: diagnose and rescale the head, train, encode, index, search, evaluate.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)
"""The ``spladekit`` command (a typer application): each module of :mod:`spladekit.cli` registers its
commands on it; ``app()`` runs the command line (:func:`spladekit.cli.main` does, for the console script)."""


def trust_option():
    """``--trust-remote-code``: the one spelling of the flag of every command that loads a model
    (passed on to the one loader, :func:`spladekit.model.folders.read_model_folder`)."""
    return typer.Option(
        False,
        "--trust-remote-code",
        help="run Python code of the model folder (custom sentence-transformers "
        "modules, transformers auto_map classes); only for a folder whose code you trust",
    )


def fail(exc: Exception) -> None:
    """Print ``error: <exc>`` in red on stderr (``error: `` before each line of a multi-line message)
    and exit with status 2 (every command's error path)."""
    for line in str(exc).splitlines() or [""]:
        typer.secho(f"error: {line}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=2)


def options_error(exc, renamed: dict[str, str] | None = None) -> ValueError:
    """A pydantic ``ValidationError`` of a command's settings as a ``ValueError`` of one line per
    bad field, each naming its command-line option (field ``rrf_k`` → ``--rrf-k``; ``renamed`` maps
    the fields whose option is spelled otherwise, e.g. ``{"weights": "--weight"}``), instead of
    pydantic's multi-line dump. Formatting: :func:`spladekit.errors.validation_problems`."""
    from spladekit.errors import validation_problems

    lines = []
    for field, message in validation_problems(exc):
        name = field.split(".")[0]
        option = (renamed or {}).get(name) or ("--" + name.replace("_", "-") if name else "options")
        lines.append(f"{option}: {message}")
    return ValueError("\n".join(lines))
