"""The doctor's torch facts, read from files in milliseconds, must equal what Python
torch itself reports after loading the libraries (same wheel, same venv)."""
import json
import os
import subprocess
import sys

import torch

out = subprocess.run([os.environ["TRAINBOX_BIN"], "doctor", "--json"], capture_output=True, text=True)
assert out.returncode == 0, out.stderr
doc = json.loads(out.stdout)
t = doc["report"]["torch"]
libs = {l["name"]: l for l in doc["report"]["libraries"]}
checks = {
    "version": (t["version"], torch.__version__),
    "cuda build": (t["cuda_version"], torch.version.cuda),
    "arch list": (" ".join(t["arch_list"]), torch._C._cuda_getArchFlags()),
    "cxx11 abi": (t["cxx11_abi"], int(torch._C._GLIBCXX_USE_CXX11_ABI)),
    "nccl (built with)": (t["nccl_version"], ".".join(map(str, torch.cuda.nccl.version()))),
    "nccl (loaded)": (libs["nccl"]["version"], ".".join(map(str, torch.cuda.nccl.version()))),
    "torch root": (os.path.realpath(t["root"]), os.path.realpath(os.path.dirname(torch.__file__))),
}
v = torch.backends.cudnn.version()  # the cuDNN torch loads: 91900 = 9.19.0
checks["cudnn (loaded)"] = (libs["cudnn"]["version"], f"{v // 10000}.{v % 10000 // 100}.{v % 100}")
checks["cudnn (built with)"] = (t["cudnn_version"], f"{v // 10000}.{v % 10000 // 100}.{v % 100}")
bad = 0
for name, (ours, theirs) in checks.items():
    ok = str(ours) == str(theirs)
    bad += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {name}: trainbox={ours!r} torch={theirs!r}")
if any(f["id"] == "no-gpu-cpu-fallback" for f in doc["findings"]) != (not torch.cuda.is_available()):
    print("FAIL: CPU fallback finding disagrees with torch.cuda.is_available()")
    bad += 1
sys.exit(1 if bad else 0)
