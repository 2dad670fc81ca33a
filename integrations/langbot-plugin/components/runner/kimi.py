"""Kimi Code, through harness-bridge (over the Agent Client Protocol)."""

from components.runner.harness_runner import HarnessRunner


class Kimi(HarnessRunner):
    harness = "kimi"
    label = "Kimi Code"
    key_var = "KIMI_MODEL_API_KEY"
    url_var = "KIMI_MODEL_BASE_URL"
