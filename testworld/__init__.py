"""The local test world: a real control plane, a fake GitHub, a pod stand-in and the demo.

Development only: nothing here ships in the operator package or image.  It may import the
operator; the operator never imports it (``make lint`` checks the contract).
"""
