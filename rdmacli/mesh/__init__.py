"""`rdmacli mesh`: an all-pairs RDMA check across many nodes.

schedule.py (who meets whom in which round), nodes.py (node sets and their RDMA addresses),
agent.py (one per node: runs its pairs through the engine), launch.py (ClusterShell's ssh and
exec workers, srun), report.py (merging the agents' records, blame, baseline, the summary).
No click and no rich here: the CLI is rdmacli/cli/mesh.py, the rendering rdmacli/render/mesh.py.
"""
