"""Looking at the local RDMA setup: devices, ports, GIDs (sysfs, and pyverbs where it is installed)."""
