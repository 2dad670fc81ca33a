"""Cline, through harness-bridge.

Written by scripts/langbot-runners from `harness-bridge manifest`.
"""

from components.runner.harness_runner import HarnessRunner


class Cline(HarnessRunner):
    harness = "cline"
    label = "Cline"
    key_var = "CLINE_API_KEY"
    url_var = "CLINE_BASE_URL"
    # It pulls the follow-ups sent while a turn works (chat commands too).
    steering = True
