"""What the benchmark scripts share. Importing it puts the repository root on the path, so the scripts
find testkit/ (the development kit, which is not packaged) however they are started."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
