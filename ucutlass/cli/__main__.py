"""``python -m ucutlass.cli``: the command line (the MCP server and campaigns run it so, in child processes)."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
