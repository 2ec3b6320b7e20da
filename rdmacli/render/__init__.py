"""Everything people see: rich tables, live views, plain summaries. No RDMA imports here."""
