"""`python -m rebalancer`: the same command line as the `rebalancer` script."""

import sys

from rebalancer.app.cli import main

sys.exit(main())
