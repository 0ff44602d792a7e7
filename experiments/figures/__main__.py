"""`python -m experiments.figures`: see experiments/figures/cli.py."""

import sys

from experiments.figures.cli import main

sys.exit(main())
