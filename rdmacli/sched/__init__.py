"""Verdicts that act: a scheduler's side of rdmacli's verdicts (slurm.py: drain and resume).

Knows nothing of click, rich or the mesh: `check`'s CLI and the fleet front-ends hand it a node
name and a reason, and it acts through the scheduler's own command.
"""
