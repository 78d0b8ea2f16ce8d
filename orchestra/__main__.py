"""``python -m orchestra``: the same command line as ``orchestra``."""

from ._main import main

main(prog_name="orchestra")
