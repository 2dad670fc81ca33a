"""Gemini CLI, through harness-bridge."""

from components.runner.harness_runner import HarnessRunner


class Gemini(HarnessRunner):
    harness = "gemini"
    label = "Gemini CLI"
    key_var = "GEMINI_API_KEY"
    url_var = "GOOGLE_GEMINI_BASE_URL"
