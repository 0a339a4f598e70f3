"""``python -m ucutlass``: the ``ucutlass`` command line (as ``python -m ucutlass.cli``)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
