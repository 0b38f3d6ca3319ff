import sys

from labkit.sim.cli import main

sys.exit(main())
