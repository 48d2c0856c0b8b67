"""reproduce: the paper's comparison grid from one YAML config."""

from __future__ import annotations

import shlex
import signal
import sys
import time
from pathlib import Path

import typer

from spladekit.cli.app import app, fail, trust_option


@app.command()
def reproduce(
    config: Path = typer.Argument(..., help="grid config YAML (see configs/reproduce-*.yaml)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the plan, resolve inputs offline, run nothing"),
    set_: list[str] | None = typer.Option(None, "--set", help="override a config value: key.sub=value (YAML value)"),
    out: Path | None = typer.Option(None, help="output folder (default: output_dir of the config)"),
    cell: list[str] | None = typer.Option(None, "--cell", help="run only this cell id (repeatable)"),
    force: bool = typer.Option(False, help="redo stages that an older, different config produced"),
    report_only: bool = typer.Option(False, "--report-only", help="only (re)write the tables and plots"),
    publish: Path | None = typer.Option(
        None, help="also write the report here (e.g. docs/results.md), plots in img/ beside it"
    ),
    trust_remote_code: bool = trust_option(),
):
    """Run backbone × head treatment × seed: diagnose, rescale, train, evaluate; write tables and plots.

    A half-finished grid resumes: finished stages of each cell are skipped.
    """
    from spladekit.errors import SpladekitError
    from spladekit.reproduce import describe_plan, load_reproduce_config, write_report
    from spladekit.reproduce.report import plot_files

    try:
        grid = load_reproduce_config(config, set_ or [])
    except SpladekitError as exc:
        fail(exc)
    folder = out or Path(grid.output_dir)
    if dry_run:
        typer.echo(describe_plan(grid, folder))
        return
    command = (
        "spladekit reproduce " + " ".join(shlex.quote(a) for a in sys.argv[2:] if a) if len(sys.argv) > 1 else None
    )
    outcome = None if report_only else _run_sitting(grid, folder, command, cell, force, trust_remote_code)
    written = write_report(grid, folder, command=command, publish=publish)
    typer.echo(
        f"wrote {written['markdown']}, {written['cells_csv'].name}, {written['arms_csv'].name}"
        + f" and {len(plot_files(written))} plot(s)"
        + (f"; published to {written['published']}" if publish else "")
    )
    if outcome is not None:
        typer.echo(
            f"cells: {len(outcome.done)} done, {len(outcome.skipped)} skipped (finished earlier), "
            f"{len(outcome.diverged)} diverged, {len(outcome.failed)} failed"
        )
        if outcome.failed:
            for cell_id, error in outcome.failed.items():
                typer.secho(f"  {cell_id}: {error}", fg=typer.colors.RED, err=True)
            raise typer.Exit(code=1)


def _run_sitting(grid, folder: Path, command: str | None, cell: list[str] | None, force: bool, trust_remote_code: bool):
    """One sitting of the grid's cells, its time recorded in the folder (``record_sitting``) when it ran
    something or was interrupted (Ctrl-C or ``kill``: exit code 130, finished stages kept)."""
    from spladekit.errors import SpladekitError
    from spladekit.reproduce import run_grid
    from spladekit.reproduce.grid import record_sitting

    started, clock = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), time.perf_counter()

    def stop(signum, frame):  # `kill PID` ends the sitting like Ctrl-C: recorded below, then exit
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        from spladekit.reproduce.cells import SpladekitRunner

        outcome = run_grid(
            grid,
            folder,
            SpladekitRunner(trust_remote_code=trust_remote_code),
            cells=cell or None,
            force=force,
            log=typer.echo,
        )
    except (SpladekitError, ValueError) as exc:
        fail(exc)
    except KeyboardInterrupt:  # the time spent counts in the report's total wall time
        record_sitting(
            folder,
            {
                "command": command,
                "started": started,
                "wall_seconds": round(time.perf_counter() - clock, 1),
                "interrupted": True,
            },
        )
        typer.echo("interrupted: finished stages are kept; the same command resumes", err=True)
        raise typer.Exit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    if outcome.done or outcome.diverged or outcome.failed:  # a sitting that ran something
        record_sitting(
            folder,
            {
                "command": command,
                "started": started,
                "wall_seconds": round(time.perf_counter() - clock, 1),
                "done": len(outcome.done),
                "skipped": len(outcome.skipped),
                "diverged": len(outcome.diverged),
                "failed": len(outcome.failed),
            },
        )
    return outcome
