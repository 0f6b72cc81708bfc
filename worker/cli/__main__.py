"""`python -m askq.cli`: the `askq` command, as when the CLI was one module."""

from . import main

main(prog_name="askq")
