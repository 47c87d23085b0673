import sys

from agentd.cli.main import main

sys.exit(main())
