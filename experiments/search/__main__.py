"""`python -m experiments.search`: runs experiments/search/main.py."""

import sys

from experiments.search.main import main

sys.exit(main())
