"""``python -m spladekit`` runs the command line."""

from spladekit.cli import main

main()
