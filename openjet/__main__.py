"""`python -m openjet` runs the CLI."""

from openjet.cli import main

main()
