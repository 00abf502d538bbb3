"""``python -m agentgym.cli``: the `agentgym` command."""

import sys

from agentgym.cli import main

sys.exit(main())
