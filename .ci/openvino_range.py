"""Prints the lowest and the highest openvino release that the npu plugin's
requirement allows (plugins/npu/pyproject.toml) and the index offers:
``LOWEST HIGHEST``. Used by .ci/npu-openvino-range and .ci/second-config.
Run with the Python whose pip should ask the index."""

import re
import subprocess
import sys
from pathlib import Path

from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.version import Version

text = (Path(__file__).resolve().parent.parent / "plugins" / "npu" / "pyproject.toml").read_text(encoding="utf-8")
deps = re.search(r"^dependencies\s*=\s*\[(.*?)\]", text, re.M | re.S).group(1)
req = next(Requirement(r) for r in re.findall(r'"([^"]+)"', deps) if Requirement(r).name == "openvino")
out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "openvino"],
                     capture_output=True, text=True, check=True).stdout
listed = re.search(r"Available versions:\s*(.*)", out).group(1).split(",")
allowed = sorted(v for v in (Version(s.strip()) for s in listed) if v in req.specifier and not v.is_prerelease)
if not allowed:
    sys.exit(f"no openvino release satisfies {req}")
print(allowed[0], allowed[-1])
