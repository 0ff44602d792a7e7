"""`python -m experiments.capacity`: runs experiments/capacity/main.py."""

import sys

from experiments.capacity.main import main

sys.exit(main())
