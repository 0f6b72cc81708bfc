"""`python -m askq.cli`, as `python -m askq` (the command group is the package's)."""

from . import main

main(prog_name="askq")
