"""`python -m experiments.fidelity`: runs experiments/fidelity/main.py."""

import sys

from experiments.fidelity.main import main

sys.exit(main())
