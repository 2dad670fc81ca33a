"""Codex, through harness-bridge.

Written by scripts/langbot-runners from `harness-bridge manifest`.
"""

from components.runner.harness_runner import HarnessRunner


class Codex(HarnessRunner):
    harness = "codex"
    label = "Codex"
    key_var = "OPENAI_API_KEY"
    url_var = "OPENAI_BASE_URL"
    # It pulls the follow-ups sent while a turn works (chat commands too).
    steering = True
