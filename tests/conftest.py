"""Shared test setup: run from the repository root so `core`, `ui` and `runners` import."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The hosted-demo config hides error details from visitors; tests want the full message
# and stack when a page fails.
from streamlit import config as _streamlit_config  # noqa: E402

_streamlit_config.set_option("client.showErrorDetails", "full")
