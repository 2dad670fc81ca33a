"""Claude Code, through harness-bridge.

Written by scripts/langbot-runners from `harness-bridge manifest`.
"""

from components.runner.harness_runner import HarnessRunner


class ClaudeCode(HarnessRunner):
    harness = "claude-code"
    label = "Claude Code"
    key_var = "ANTHROPIC_API_KEY"
    url_var = "ANTHROPIC_BASE_URL"
    # It pulls the follow-ups sent while a turn works (chat commands too).
    steering = True
