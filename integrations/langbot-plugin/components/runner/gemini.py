"""Gemini CLI, through harness-bridge.

Written by scripts/langbot-runners from `harness-bridge manifest`.
"""

from components.runner.harness_runner import HarnessRunner


class Gemini(HarnessRunner):
    harness = "gemini"
    label = "Gemini CLI"
    key_var = "GEMINI_API_KEY"
    url_var = "GOOGLE_GEMINI_BASE_URL"
    # It pulls the follow-ups sent while a turn works (chat commands too).
    steering = True
