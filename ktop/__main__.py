import sys

from ktop.cli import main

sys.exit(main())
