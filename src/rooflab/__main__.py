import sys

from rooflab.cli import main

sys.exit(main())
