"""Loads librdmacm and libibverbs once, on first use, with advice when they are missing."""

from __future__ import annotations

from rdmacli.errors import EnvironmentProblem

_state: dict = {}


def ffi():
    if "ffi" not in _state:
        try:
            import cffi
        except ImportError as exc:
            raise EnvironmentProblem("cffi is not installed", hint="pip install cffi") from exc
        from rdmacli.rdma._cdef import CDEF

        f = cffi.FFI()
        f.cdef(CDEF)
        _state["ffi"] = f
    return _state["ffi"]


def _open(name: str, package: str):
    try:
        return ffi().dlopen(name)
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot load {name}: {exc}", hint=f"apt-get install {package}  (rdma-core's runtime library)"
        ) from exc


def rdmacm():
    if "rdmacm" not in _state:
        _state["ibverbs"] = ibverbs()
        _state["rdmacm"] = _open("librdmacm.so.1", "librdmacm1")
    return _state["rdmacm"]


def ibverbs():
    if "ibverbs" not in _state:
        _state["ibverbs"] = _open("libibverbs.so.1", "libibverbs1 ibverbs-providers")
    return _state["ibverbs"]
