import sys

from mmreason.cli import main

sys.exit(main())
