"""The operator under test always gets working credentials of deploy/'s ServiceAccount.

The install tests on the node uninstall the operator, which deletes its ServiceAccount and
with its namespace, and with them every token: every operator started after them got 401 at
its first list and never became ready (five node tests failed in one full run).
"""

from __future__ import annotations

import yaml

from testworld.envtest.controlplane import ControlPlane
from testworld.envtest.serviceaccount import OPERATOR_USER, authenticated_user, operator_kubeconfig


def test_credentials_are_minted_again_once_the_api_server_refuses_them(control_plane: ControlPlane) -> None:
    """An uninstall deletes the account (and its namespace); its tokens are refused from then on
    (the API server's caches decide how soon, so the refusal is made here at once: the token
    is replaced by one no account ever had)."""
    first = operator_kubeconfig(control_plane)
    assert authenticated_user(first) == OPERATOR_USER
    config_text = first.read_text()
    token = yaml.safe_load(config_text)["users"][0]["user"]["token"]
    first.write_text(config_text.replace(token, "not-a-token-of-anyone"))
    assert authenticated_user(first) is None, "refused, as after the uninstall"

    again = operator_kubeconfig(control_plane)

    assert authenticated_user(again) == OPERATOR_USER, "deploy/rbac applied again and a new token written"
