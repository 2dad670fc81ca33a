"""Qwen Code, through harness-bridge."""

from components.runner.harness_runner import HarnessRunner


class Qwen(HarnessRunner):
    harness = "qwen"
    label = "Qwen Code"
    key_var = "OPENAI_API_KEY"
    url_var = "OPENAI_BASE_URL"
