"""A cluster that refuses: a ValidatingAdmissionPolicy made for one test, in its namespace only.

What a real cluster's admission policies (Kyverno, Gatekeeper, a ValidatingAdmissionPolicy) do
to the operator's writes, without a webhook server: the API server itself refuses the request
(``Deny``: 422 Invalid with the policy's message) once its policy informer has the policy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.helpers import wait_for


@contextmanager
def refusing(
    api_client: client.ApiClient,
    namespace: str,
    *,
    operation: str,
    resource: tuple[str, str, str],
    allowed: str,
    message: str,
    probe: Callable[[], object],
) -> Iterator[None]:
    """While inside, ``operation`` on ``resource`` (group, version, plural) in ``namespace`` is
    refused unless the CEL ``allowed`` holds; returns once ``probe`` (a dry run of such a
    request) is refused, so that the policy is in force; deletes the policy on the way out."""
    group, version, plural = resource
    name = f"refuse-{operation.lower()}-{plural}-{namespace}"
    scope = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}
    rules = [
        {"apiGroups": [group], "apiVersions": [version], "operations": [operation], "resources": [plural]}
    ]
    admission = client.AdmissionregistrationV1Api(api_client)
    admission.create_validating_admission_policy(
        {
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {**scope, "resourceRules": rules},
                "validations": [{"expression": allowed, "message": message}],
            },
        }
    )
    admission.create_validating_admission_policy_binding(
        {
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"], "matchResources": scope},
        }
    )
    try:

        def refused() -> bool:
            try:
                probe()
            except ApiException as err:
                return message in str(err.body)
            return False

        wait_for(refused, message=f"the API server to enforce policy {name}")
        yield
    finally:
        admission.delete_validating_admission_policy_binding(name)
        admission.delete_validating_admission_policy(name)
