"""rdmacli: the librdmacm test utilities as one command-line toolkit."""

__version__ = "0.1.0"
