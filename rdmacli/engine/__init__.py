"""The connection-flow engine: rdma_cm(7) client and server sequences on one selector loop.

Knows nothing of click or rich. Progress leaves through an observer callback (see `observer`).
"""
