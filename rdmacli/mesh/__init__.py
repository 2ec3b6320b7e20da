"""`rdmacli mesh`: an all-pairs RDMA check across many nodes, as a library.

The contract: contract.py (the run spec every agent gets on stdin, declared once) and
records.py (what agents print, typed, checked on the way in). The coordinator: run.py (the
session: discovery, launch, the run loop, the verdict; `run(request, launch, observer)`),
plan.py (the run as the coordinator holds it), intake.py (agents' lines in, trusted only as far
as they may be), verdict.py (decisions and the verdict as functions of data), report.py (a
pair's two ends merged, the tables), blame.py (bad nodes, NICs and links; slow pairs),
launch.py (ClusterShell's ssh and exec workers, srun). The agent: agent.py (one per node: its
slots), pair.py (one pair's test through the engine). Around them: schedule.py (who meets whom
in which round), nodes.py, rails.py, inputs.py, token.py. No click and no rich here: the CLI is
rdmacli/cli/mesh.py and mesh_agent.py, the rendering rdmacli/render/mesh.py.
"""
