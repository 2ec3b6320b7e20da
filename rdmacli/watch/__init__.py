"""`rdmacli watch`: the fabric checked all the time (issue 37). So far its verdict over time."""
