"""`rdmacli watch`: the fabric checked all the time: plan, agent, judgement, verdicts, metrics, status."""

# a watch plan's defaults, said once for the plan (plan.py) and the command line (cli/watch.py),
# here where the command line reads them without importing the probe
PORT = 7590  # rail k listens on PORT + k
WINDOW_S = 10.0
COUNT = 20  # probes to each partner in a window
