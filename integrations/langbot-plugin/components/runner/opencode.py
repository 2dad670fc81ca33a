"""opencode, through harness-bridge.

Written by scripts/langbot-runners from `harness-bridge manifest`.
"""

from components.runner.harness_runner import HarnessRunner


class Opencode(HarnessRunner):
    harness = "opencode"
    label = "opencode"
    key_var = "ANTHROPIC_API_KEY"
    url_var = ""
    # It pulls the follow-ups sent while a turn works (chat commands too).
    steering = True
