"""opencode, through harness-bridge (over the Agent Client Protocol)."""

from components.runner.harness_runner import HarnessRunner


class Opencode(HarnessRunner):
    harness = "opencode"
    label = "opencode"
    key_var = "ANTHROPIC_API_KEY"
    # No base URL field: the provider's endpoint is opencode's configuration.
    url_var = ""
