"""The wheel's build hook: a platform wheel with the native data path where it can be built.

`pip wheel .` (or `python -m build`) compiles rdmacli/native/*.c against libibverbs
(rdmacli.native._build) and puts the extension in the wheel, which is then tagged for this
platform and Python. Without a compiler, cffi or libibverbs-dev, or with RDMACLI_PURE_WHEEL=1,
the wheel is pure (py3-none-any) and rdmacli measures with its Python loops, saying so
(`data_path: python`). Editable installs (make venv) build the extension in place instead.
"""

from __future__ import annotations

import os
import sys
import tempfile

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class NativeDataPath(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        if version == "editable" or os.environ.get("RDMACLI_PURE_WHEEL") == "1":
            return
        sys.path.insert(0, self.root)
        try:
            from rdmacli.native._build import build

            out = tempfile.mkdtemp(prefix="rdmacli-native-")
            path = build(out)
        except Exception as exc:  # no compiler, headers or cffi: a pure wheel, said
            sys.stderr.write(f"rdmacli: building a pure wheel, the native data path did not build: {exc}\n")
            return
        finally:
            sys.path.remove(self.root)
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        build_data["force_include"][path] = f"rdmacli/native/{os.path.basename(path)}"
