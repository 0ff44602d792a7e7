"""`python -m experiments.validate`: runs experiments/validate/main.py."""

import sys

from experiments.validate.main import main

sys.exit(main())
