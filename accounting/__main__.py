import sys

from accounting.cli import main

sys.exit(main())
