"""What the runner decides before the bridge runs: the harness's launch,
its deadline, a follow-up's own turn."""

from types import SimpleNamespace

import pytest

from components.runner.bridge import DEFAULT_PATH
from components.runner.codex import Codex
from components.runner.harness_runner import (
    DEADLINE_MARGIN,
    LAUNCH_KEYS,
    binding_config,
    can_pull_steering,
    follow_up_context,
    harness_deadline,
)
from components.runner.opencode import Opencode


def test_no_deadline_stays_none():
    assert harness_deadline(None, 1000.0) is None


def test_the_harness_stops_a_margin_before_the_run():
    assert harness_deadline(1600.0, 1000.0) == 1600.0 - DEADLINE_MARGIN


def test_the_margin_is_at_most_a_quarter_of_the_time_left():
    assert harness_deadline(1020.0, 1000.0) == 1015.0


def test_a_deadline_already_past_gets_no_margin():
    assert harness_deadline(990.0, 1000.0) == 990.0


@pytest.mark.parametrize(("apis", "pulls"), [(SimpleNamespace(steering_pull=True), True),
                                             (SimpleNamespace(steering_pull=False), False),
                                             (SimpleNamespace(), False),
                                             (None, False)])
def test_follow_ups_are_pulled_only_where_the_host_offers_it(apis, pulls):
    ctx = SimpleNamespace(context=SimpleNamespace(available_apis=apis))
    assert can_pull_steering(ctx) is pulls
    assert can_pull_steering(object()) is False


class Dumps:
    def __init__(self, value):
        self.value = value

    def model_dump(self, mode, exclude_none):
        assert (mode, exclude_none) == ("json", True)
        return self.value


def test_a_follow_up_runs_in_the_runs_context_with_its_own_event_and_input():
    context = {"run_id": "r1", "state": {"stale": True}, "config": {"model": "m"}, "event": {"id": "e1"}}
    item = SimpleNamespace(event=Dumps({"id": "e2"}), input=Dumps({"text": "and then?"}))
    turn = follow_up_context(context, item, "r1.2")
    assert turn == {"run_id": "r1.2", "config": {"model": "m"}, "event": {"id": "e2"}, "input": {"text": "and then?"}}
    # The run's own context is left as it was.
    assert context["run_id"] == "r1" and "state" in context


def test_a_follow_up_is_its_senders_not_the_runs_askers():
    context = {"run_id": "r1", "actor": {"actor_id": "ann"}, "subject": {"subject_id": "m1"}}
    item = SimpleNamespace(event=Dumps({"id": "e2"}), input=Dumps({"text": "/new"}),
                           actor=Dumps({"actor_type": "user", "actor_id": "bob"}), subject=None)
    turn = follow_up_context(context, item, "r1.2")
    assert turn["actor"] == {"actor_type": "user", "actor_id": "bob"}
    assert "subject" not in turn
    assert context["actor"] == {"actor_id": "ann"}


@pytest.fixture
def storage(tmp_path, monkeypatch):
    monkeypatch.setenv("LANGBOT_PLUGIN_FILE_STORAGE_DIR", str(tmp_path / "storage"))
    return tmp_path


def test_the_forms_key_and_endpoint_become_the_harnesss_variables(storage):
    env, program = Codex().launch({"api_key": "sk-1", "base_url": "http://127.0.0.1:9/v1", "extra_env": "A=b"})
    assert env["OPENAI_API_KEY"] == "sk-1"
    assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:9/v1"
    assert env["A"] == "b"
    assert env["PATH"] == DEFAULT_PATH
    assert env["HOME"] == str(storage / "home")
    assert program is None


def test_a_harness_without_an_endpoint_field_ignores_a_base_url(storage):
    env, _ = Opencode().launch({"api_key": "k", "base_url": "http://elsewhere"})
    assert env["ANTHROPIC_API_KEY"] == "k"
    assert "http://elsewhere" not in env.values()


def test_the_harness_path_leads_the_path_and_the_operators_home_is_kept(storage):
    env, program = Codex().launch({"harness_path": " /opt/codex/bin/codex ", "extra_env": "PATH=/usr/bin\nHOME=/srv"})
    assert program == "/opt/codex/bin/codex"
    assert env["PATH"] == "/opt/codex/bin:/usr/bin"
    assert env["HOME"] == "/srv"


def test_an_empty_key_sets_nothing(storage):
    env, _ = Codex().launch({"api_key": ""})
    assert "OPENAI_API_KEY" not in env
    assert set(env) == {"PATH", "HOME"}


def test_secrets_and_launch_settings_never_reach_the_context():
    assert {"api_key", "base_url", "extra_env", "harness_path"} <= set(LAUNCH_KEYS)


def test_the_forms_turn_timeout_reaches_the_binding_as_timeout_seconds():
    binding = binding_config({"timeout": 120, "model": "m", "api_key": "secret", "harness_path": "/x"})
    assert binding == {"timeout_seconds": 120, "model": "m"}
