"""Runners on GitHub, matched with their pods: one shared listing per scope, garbage
collection of offline runners, one job per pod, and an API budget that lasts.

Kept import-free: ``runnerpool.reconciler`` and ``runnerpool.operator`` import the modules
they need, and the pure decision modules stay importable without the scheduler.
"""
