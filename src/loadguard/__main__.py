"""``python -m loadguard``: the command line."""

from .cli import main

main()
