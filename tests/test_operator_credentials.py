"""The operator under test always gets working credentials of deploy/'s ServiceAccount.

The install tests on the node uninstall the operator, which deletes its ServiceAccount and
with its namespace, and with them every token: every operator started after them got 401 at
its first list and never became ready (five node tests failed in one full run).
"""

from __future__ import annotations

import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from testworld.envtest.controlplane import ControlPlane
from testworld.envtest.serviceaccount import OPERATOR_USER, operator_kubeconfig


def _whoami(kubeconfig: str) -> str | None:
    """Who the API server takes the kubeconfig's token for; ``None``: it refuses it (401)."""
    api = config.new_client_from_config(config_file=kubeconfig)
    try:
        return str(client.AuthenticationV1Api(api).create_self_subject_review({}).status.user_info.username)
    except ApiException as err:
        if err.status != 401:
            raise
        return None
    finally:
        api.close()


def test_credentials_are_minted_again_once_the_api_server_refuses_them(control_plane: ControlPlane) -> None:
    """An uninstall deletes the account (and its namespace); its tokens are refused from then on
    (the API server's caches decide how soon, so the refusal is made here at once: the token
    is replaced by one no account ever had)."""
    first = operator_kubeconfig(control_plane)
    assert _whoami(str(first)) == OPERATOR_USER
    config_text = first.read_text()
    token = yaml.safe_load(config_text)["users"][0]["user"]["token"]
    first.write_text(config_text.replace(token, "not-a-token-of-anyone"))
    assert _whoami(str(first)) is None, "refused, as after the uninstall"

    again = operator_kubeconfig(control_plane)

    assert _whoami(str(again)) == OPERATOR_USER, "deploy/rbac applied again and a new token written"
