import sys

from refsim.cli import main

sys.exit(main())
