"""Each runner manifest and its class agree, as LangBot loads them."""

import importlib.util
from pathlib import Path

import pytest
import yaml

PLUGIN = Path(__file__).resolve().parents[1]
MANIFESTS = sorted((PLUGIN / "components" / "runner").glob("*.yaml"))


def load(manifest):
    doc = yaml.safe_load(manifest.read_text())
    python = doc["execution"]["python"]
    path = manifest.parent / python["path"]
    spec = importlib.util.spec_from_file_location(f"runner_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return doc, getattr(module, python["attr"])


def test_there_is_a_runner_per_harness():
    assert len(MANIFESTS) >= 7


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda p: p.stem)
def test_the_class_runs_the_runner_its_manifest_names(manifest):
    doc, runner = load(manifest)
    assert runner.harness == doc["metadata"]["name"]
    assert runner.label == doc["metadata"]["label"]["en_US"]
    # A runner pulls follow-ups only when it declares it may take them.
    assert runner.steering == bool(doc["spec"]["capabilities"].get("steering"))


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda p: p.stem)
def test_the_key_and_endpoint_fields_name_the_variables_they_become(manifest):
    doc, runner = load(manifest)
    fields = {f["name"]: f for f in doc["spec"]["config"]}
    for name, var in (("api_key", runner.key_var), ("base_url", runner.url_var)):
        if var:
            assert fields[name]["label"]["en_US"] == var
        else:
            assert name not in fields
    if "api_key" in fields:
        assert fields["api_key"]["type"] == "secret"
