import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

# the e2e marker (registered here) and its guard: a test that starts a process must carry it
from e2e_guard import (  # noqa: E402,F401
    pytest_configure,
    pytest_runtest_call,
    pytest_runtest_setup,
    pytest_runtest_teardown,
)
