"""Codex, through harness-bridge."""

from components.runner.harness_runner import HarnessRunner


class Codex(HarnessRunner):
    harness = "codex"
    label = "Codex"
    key_var = "OPENAI_API_KEY"
    url_var = "OPENAI_BASE_URL"
    # The app-server takes a follow-up into the running turn (turn/steer).
    steering = True
