"""`python -m peftviz`: the command line (`peftviz.cli`), as the `peftviz` console command runs it."""

import sys

from peftviz.cli import main

if __name__ == "__main__":
    sys.exit(main())
