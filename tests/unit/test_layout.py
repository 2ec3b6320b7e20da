"""The hand-written cffi layouts must match the installed rdma-core headers, field by field.

One miscounted padding entry in ibv_context_ops makes "post_recv" call another function; this is
the guard (design: "The layout conformance test is not optional").
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from rdmacli.rdma._cdef import CHECKED
from rdmacli.rdma._ffi import ffi


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory) -> dict[tuple[str, str], int]:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed for the layout test (apt-get install gcc)"
    lines = [
        "#include <stdio.h>",
        "#include <stddef.h>",
        "#include <infiniband/verbs.h>",
        "#include <rdma/rdma_cma.h>",
        "int main(void) {",
    ]
    for struct, (fields, _) in CHECKED.items():
        lines.append(f'printf("{struct}|sizeof|%zu\\n", sizeof({struct}));')
        for f in fields:
            lines.append(f'printf("{struct}|{f}|%zu\\n", offsetof({struct}, {f}));')
    lines += ["return 0; }"]
    d = tmp_path_factory.mktemp("layout")
    (d / "layout.c").write_text("\n".join(lines))
    r = subprocess.run([cc, "-o", str(d / "layout"), str(d / "layout.c")], capture_output=True, text=True)
    assert r.returncode == 0, f"compile failed (apt-get install librdmacm-dev libibverbs-dev):\n{r.stderr}"
    out = subprocess.run([str(d / "layout")], capture_output=True, text=True, check=True).stdout
    result = {}
    for line in out.splitlines():
        struct, field, value = line.split("|")
        result[(struct, field)] = int(value)
    return result


@pytest.mark.parametrize("struct", sorted(CHECKED))
def test_struct_layout_matches_headers(struct, c_layout):
    f = ffi()
    fields, check_size = CHECKED[struct]
    if check_size:
        assert f.sizeof(struct) == c_layout[(struct, "sizeof")], f"sizeof({struct})"
    for field in fields:
        assert f.offsetof(struct, field) == c_layout[(struct, field)], f"offsetof({struct}, {field})"


def test_known_offsets_from_design():
    # Numbers measured on rdma-core 44 / x86_64 and recorded in the design.
    f = ffi()
    assert f.offsetof("struct ibv_context", "ops") == 8
    ops = [
        f.offsetof("struct ibv_context_ops", n)
        for n in ("poll_cq", "req_notify_cq", "post_send", "post_recv")
    ]
    assert ops == [88, 96, 200, 208]
    assert f.sizeof("struct rdma_cm_id") == 416
    assert f.sizeof("struct ibv_send_wr") == 128 and f.offsetof("struct ibv_send_wr", "wr") == 40
    assert f.sizeof("struct rdma_cm_event") == 80


def test_generated_cffi_module_is_fresh():
    import pathlib

    from rdmacli.rdma._build import generated_text

    committed = pathlib.Path(__file__).parents[2] / "rdmacli" / "rdma" / "_cffi_abi.py"
    assert committed.read_text() == generated_text(), "run: python -m rdmacli.rdma._build"
