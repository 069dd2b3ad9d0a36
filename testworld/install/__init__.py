"""The operator installed into the test world the way users install it, running as pods on the node.

``kustomization.yaml`` here is the test overlay of ``deploy/``; ``kustomize`` renders it
with what is known only at run time and applies it with kubectl.  An installer is one
object with ``install()`` and ``uninstall()`` (``Installer``), so another way to install
(a Helm chart) can be tried with the same suite (``tests/node/test_install.py``).
"""
