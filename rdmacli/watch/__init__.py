"""`rdmacli watch`: the fabric checked all the time: plan, agent, judgement, verdicts, metrics, status."""

# a watch plan's defaults, said once for the plan (plan.py) and the command line (cli/watch.py),
# here where the command line reads them without importing the probe
PORT = 7590  # rail k listens on PORT + k
WINDOW_S = 10.0
COUNT = 20  # probes to each partner in a window
# `watch status`: `watch show` on this many nodes at once, at most (ClusterShell's own default):
# each is a Python start beside that node's agent (in the lab, eight at once on two emulated
# CPUs named healthy NICs dead), and ssh from one host to a thousand nodes at once is a burst
# of its own; waves of them end in seconds
FANOUT = 64
