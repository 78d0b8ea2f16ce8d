"""``python -m orchestra``: the same command line as ``orchestra``."""

from ._cli.main import main

main(prog_name="orchestra")
