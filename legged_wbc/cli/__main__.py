import sys

from legged_wbc.cli import main

sys.exit(main())
