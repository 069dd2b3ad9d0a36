"""The committed CRD matches the models, and is a schema the API server can accept.

The structural checks here are cheap stand-ins for what kube-apiserver enforces
at install time, so a bad schema is caught with a precise path even where no
control plane runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from pydantic import BaseModel

from generators import crd
from runnerpool import api, naming

CRD_FILE = Path(__file__).resolve().parent.parent / "crds" / "runnerpool.yaml"
STALE_HINT = "run `python -m generators.crd`"


def _version() -> dict[str, Any]:
    versions: list[dict[str, Any]] = crd.crd_manifest()["spec"]["versions"]
    assert len(versions) == 1
    return versions[0]


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = _version()["schema"]["openAPIV3Schema"]
    return schema


def _nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from _nodes(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], f"{path}{{}}")


def test_committed_crd_matches_the_models() -> None:
    assert CRD_FILE.exists(), f"{CRD_FILE} is missing: {STALE_HINT}"
    assert yaml.safe_load(CRD_FILE.read_text()) == crd.crd_manifest(), f"{CRD_FILE} is stale: {STALE_HINT}"
    assert crd.main(["--check", "--output", str(CRD_FILE)]) == 0, f"formatting differs: {STALE_HINT}"


def test_check_mode_reports_a_stale_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "crd.yaml"
    assert crd.main(["--check", "--output", str(target)]) == 1
    assert crd.main(["--output", str(target)]) == 0
    assert crd.main(["--check", "--output", str(target)]) == 0
    target.write_text(target.read_text().replace("maximum: 1000", "maximum: 999"))
    capsys.readouterr()
    assert crd.main(["--check", "--output", str(target)]) == 1
    err = capsys.readouterr().err
    assert "-                maximum: 999" in err and "+                maximum: 1000" in err
    assert "is stale" in err


def test_crd_identity() -> None:
    manifest = crd.crd_manifest()
    assert manifest["apiVersion"] == "apiextensions.k8s.io/v1"
    assert manifest["metadata"]["name"] == f"{api.PLURAL}.{api.GROUP}"
    spec = manifest["spec"]
    assert (spec["group"], spec["scope"]) == (api.GROUP, "Namespaced")
    names = spec["names"]
    assert (names["kind"], names["plural"], names["singular"]) == (api.KIND, api.PLURAL, api.SINGULAR)
    assert names["shortNames"] == ["rp"] and names["categories"] == ["runnerpool"]
    version = _version()
    assert (version["name"], version["served"], version["storage"]) == (api.VERSION, True, True)


def test_subresources() -> None:
    assert _version()["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }


def test_printer_columns() -> None:
    columns = {c["name"]: c for c in _version()["additionalPrinterColumns"]}
    assert columns["Desired"]["jsonPath"] == ".status.desiredReplicas"
    assert columns["Busy"]["jsonPath"] == ".status.runners.busy"
    assert columns["Queued"]["jsonPath"] == ".status.demand.queued"
    assert columns["Ready"]["jsonPath"] == ".status.readyReplicas"
    assert columns["Token-Expires"] == {
        "name": "Token-Expires",
        "type": "string",  # a future "date" shows as <invalid> in kubectl
        "jsonPath": ".status.tokenExpiresAt",
    }
    assert columns["Status"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    assert columns["Age"]["type"] == "date"
    assert {columns[n]["jsonPath"] for n in ("Repository", "Organization", "Enterprise")} == {
        ".spec.repository",
        ".spec.organization",
        ".spec.enterprise",
    }
    assert columns["Enterprise"]["priority"] == 1, "shown by kubectl get -o wide"


def test_schema_is_structural() -> None:
    forbidden = {"$ref", "$defs", "anyOf", "oneOf", "allOf", "not", "const", "title", "examples", "nullable"}
    for path, node in _nodes(_schema()):
        where = path or "<root>"
        assert not forbidden & node.keys(), f"{where} has {sorted(forbidden & node.keys())}"
        assert "type" in node or node.get("x-kubernetes-int-or-string") is True, f"{where} has no type"
        assert node.get("default", "unset") is not None, f"{where} has default: null"
        for key in ("exclusiveMinimum", "exclusiveMaximum"):
            assert isinstance(node.get(key, False), bool), f"{where}: {key} must be a bool"
        if "properties" in node:
            assert node.get("additionalProperties", True) is not False, (
                f"{where}: additionalProperties: false"
            )
            assert node["type"] == "object"
        if node.get("type") == "array":
            assert isinstance(node.get("items"), dict), f"{where}: array without items"


def test_metadata_is_left_to_the_api_server() -> None:
    assert _schema()["properties"]["metadata"] == {"type": "object"}


def test_every_property_is_described() -> None:
    for path, node in _nodes(_schema()):
        for name, child in node.get("properties", {}).items():
            if f"{path}.{name}" == ".metadata":
                continue  # the API server forbids anything but a type here
            assert child.get("description", "").strip(), f"{path}.{name} has no description"


def test_every_rule_has_a_message_and_bounded_inputs() -> None:
    """The API server rejects a CEL rule whose worst-case cost it cannot bound."""
    found = 0
    for path, node in _nodes(_schema()):
        for rule in node.get("x-kubernetes-validations", []):
            found += 1
            assert rule.get("message", "").strip(), f"{path}: rule {rule['rule']} has no message"
        if node.get("x-kubernetes-validations") and (
            node.get("type") == "string" or node.get("x-kubernetes-int-or-string")
        ):
            assert "maxLength" in node, f"{path}: string checked by CEL needs maxLength"
        if node.get("type") == "array" and path.startswith(".spec"):
            assert "maxItems" in node, f"{path}: list needs maxItems"
        if node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict):
            assert "maxProperties" in node, f"{path}: map needs maxProperties"
    assert found >= 15


def test_required_rules_are_present() -> None:
    schema = _schema()
    spec = schema["properties"]["spec"]
    rules = {r["rule"] for r in spec["x-kubernetes-validations"]}
    assert any("has(self.enterprise) ? 1 : 0) == 1" in r and "has(self.organization)" in r for r in rules)
    assert any(all(f"oldSelf.{k}" in r for k in ("repository", "organization", "enterprise")) for r in rules)
    assert f"size(self.metadata.name) <= {api.MAX_POOL_NAME_LENGTH}" in {
        r["rule"] for r in schema["x-kubernetes-validations"]
    }
    assert schema["required"] == ["spec"]
    props = spec["properties"]
    assert (props["replicas"]["minimum"], props["replicas"]["maximum"]) == (0, api.MAX_REPLICAS)
    assert props["replicas"]["default"] == 1
    assert props["credentialSecretName"]["default"] == naming.DEFAULT_CREDENTIAL_SECRET
    assert props["labels"]["x-kubernetes-list-type"] == "set"
    assert props["tolerations"]["items"]["properties"]["effect"]["enum"] == [
        "NoSchedule",
        "PreferNoSchedule",
        "NoExecute",
    ]
    assert props["volumes"]["items"]["x-kubernetes-preserve-unknown-fields"] is True
    assert props["volumes"]["items"]["required"] == ["name"]
    work = props["workVolume"]
    assert (work["type"], work["x-kubernetes-preserve-unknown-fields"]) == ("object", True)
    assert "required" not in work, "any volume source passes through"
    assert set(work["properties"]) == {"secret", "projected"}, "what the credential rule reads"
    limits = props["resources"]["properties"]["limits"]["additionalProperties"]
    assert limits["x-kubernetes-int-or-string"] is True


def test_status_has_no_defaults() -> None:
    """Defaults under status would be written into every object the operator has not touched yet."""
    for path, node in _nodes(_schema()["properties"]["status"], ".status"):
        assert "default" not in node, path


class _Unsupported(BaseModel):
    choice: int | bool


class _Constant(BaseModel):
    only: Literal["x"]


def test_translator_refuses_what_it_cannot_express() -> None:
    with pytest.raises(crd.SchemaError):
        crd.to_structural(_Unsupported.model_json_schema(), _Unsupported.__name__)


def test_a_one_value_literal_becomes_an_enum_of_one() -> None:
    """``const`` has no place in a structural schema; an enum of one says the same."""
    schema = crd.to_structural(_Constant.model_json_schema(), _Constant.__name__)
    assert schema["properties"]["only"] == {"type": "string", "enum": ["x"]}


def test_the_pod_template_keeps_what_users_write_and_bounds_what_its_rules_read() -> None:
    template = _schema()["properties"]["spec"]["properties"]["template"]
    pod = template["properties"]["spec"]
    assert pod["x-kubernetes-preserve-unknown-fields"] is True, "any pod field passes through"
    containers = pod["properties"]["containers"]
    assert (containers["maxItems"], containers["x-kubernetes-list-type"]) == (
        api.MAX_TEMPLATE_CONTAINERS,
        "map",
    )
    assert containers["items"]["x-kubernetes-preserve-unknown-fields"] is True
    assert containers["items"]["properties"]["env"]["maxItems"] == api.MAX_TEMPLATE_ITEMS
    assert "x-kubernetes-preserve-unknown-fields" not in template["properties"]["metadata"], (
        "of the metadata only labels and annotations are taken"
    )
    assert {r["rule"] for r in pod["x-kubernetes-validations"]} >= {"!has(self.restartPolicy)"}
