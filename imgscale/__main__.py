"""``python -m imgscale``: the same command line as the ``imgscale`` script."""

from imgscale.jobs.cli import main

main()
