"""`python -m mailbus` is the `mailbus` console script."""

import sys

from mailbus.app.cli import main

sys.exit(main())
