"""Kimi Code, through harness-bridge.

Written by scripts/langbot-runners from `harness-bridge manifest`.
"""

from components.runner.harness_runner import HarnessRunner


class Kimi(HarnessRunner):
    harness = "kimi"
    label = "Kimi Code"
    key_var = "KIMI_MODEL_API_KEY"
    url_var = "KIMI_MODEL_BASE_URL"
    # It pulls the follow-ups sent while a turn works (chat commands too).
    steering = True
