"""rdmacli's own binding to librdmacm and libibverbs (cffi, ABI mode). Nothing above calls C."""
