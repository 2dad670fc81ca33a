"""Copilot CLI, through harness-bridge.

Written by scripts/langbot-runners from `harness-bridge manifest`.
"""

from components.runner.harness_runner import HarnessRunner


class Copilot(HarnessRunner):
    harness = "copilot"
    label = "Copilot CLI"
    key_var = "GH_TOKEN"
    url_var = "COPILOT_PROVIDER_BASE_URL"
    # It pulls the follow-ups sent while a turn works (chat commands too).
    steering = True
