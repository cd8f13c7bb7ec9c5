"""Shared test settings: hypothesis runs without per-example deadlines (CI machines vary in speed)
and with a fixed derandomized profile in CI, so a red run is reproducible."""

import os

from hypothesis import settings

settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
