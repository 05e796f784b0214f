"""`python -m mailbus` is the `mailbus` console script."""

import sys

from mailbus.cli import main

sys.exit(main())
