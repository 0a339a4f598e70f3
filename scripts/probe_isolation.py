"""Device probe: which isolation layers work with CUDA IPC and CUDA itself on this machine.

A parent shares a CUDA tensor by IPC with a child started plainly, under Landlock (grader/sandbox.py), in a
user namespace, in both, in a PID namespace and with setsid; each child opens the handle, writes into it,
runs a matmul, tries to write outside its folder and to signal the parent. Results: $OUT/probe_isolation.json.
Usage (GPU machine, as root for the namespaces): python3 scripts/probe_isolation.py
(docs/benchmarks/2026-12-01-h200-grader-isolation.md records a run.)
"""
import json, os, subprocess, sys, time, importlib.util
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("sandbox", f"{REPO}/grader/sandbox.py")
sb = importlib.util.module_from_spec(spec); sys.modules["sandbox"] = sb; spec.loader.exec_module(sb)

CHILD = r'''
import os, sys, json, pickle, importlib.util, time
sys.path.insert(0, "")
spec = importlib.util.spec_from_file_location("sandbox", sys.argv[1] + "/grader/sandbox.py")
sb = importlib.util.module_from_spec(spec); sys.modules["sandbox"] = sb; spec.loader.exec_module(sb)
mode = sys.argv[3]
res = {"mode": mode, "pid": os.getpid()}
import torch
torch.ones(1, device="cuda").sum().item()  # CUDA up before confinement
if "landlock" in mode:
    os.makedirs("/tmp/probe_scratch", exist_ok=True)
    res["confine"] = sb.confine(["/tmp/probe_scratch", "/dev", "/dev/shm"]).to_json()
try:
    t0 = time.perf_counter()
    x = pickle.loads(open(sys.argv[2], "rb").read())
    res["ipc_open_ms"] = (time.perf_counter() - t0) * 1e3
    res["sum"] = float(x.sum())
    x.add_(1); torch.cuda.synchronize()
    res["ipc"] = "ok"
except Exception as e:
    res["ipc"] = f"{type(e).__name__}: {e}"[:300]
try:
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16); (a @ a).float().sum().item()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True); s.record(); a @ a; e.record(); torch.cuda.synchronize(); s.elapsed_time(e)
    res["cuda_after"] = "ok"
except Exception as e:
    res["cuda_after"] = f"{type(e).__name__}: {e}"[:300]
for path in ["/tmp/probe_scratch/ok", "/tmp/escape_probe", "/root/escape_probe"]:
    try:
        open(path, "w").write("x"); res["write " + path] = "allowed"
    except OSError as e:
        res["write " + path] = str(e)
try:
    os.kill(int(sys.argv[4]), 0); res["signal grader"] = "allowed"
except OSError as e:
    res["signal grader"] = str(e)
print("RESULT " + json.dumps(res))
'''

def main():
    import torch
    import torch.multiprocessing  # registers tensor reductions
    from multiprocessing.reduction import ForkingPickler
    info = {"uname": os.uname().release, "landlock_abi": sb.landlock_abi(), "python": sys.version.split()[0],
            "torch": torch.__version__, "cgroup": open("/proc/self/cgroup").read().strip(),
            "cgroup2": [l for l in open("/proc/mounts") if "cgroup" in l], "nproc": os.cpu_count()}
    print(json.dumps(info, indent=1))
    x = torch.arange(1000, device="cuda", dtype=torch.float32)
    path = "/tmp/probe_tensor.pkl"
    open(path, "wb").write(bytes(ForkingPickler.dumps(x)))
    code = "/tmp/probe_child.py"; open(code, "w").write(CHILD)
    variants = {
        "plain": [],
        "landlock": [],
        "userns": ["unshare", "--user", "--map-root-user"],
        "userns+landlock": ["unshare", "--user", "--map-root-user"],
        "pidns": ["unshare", "--pid", "--fork", "--kill-child"],
        "setsid": ["setsid"],
    }
    out = {}
    for mode, pre in variants.items():
        before = float(x.sum())
        t0 = time.time()
        p = subprocess.run(pre + [sys.executable, code, REPO, path, mode, str(os.getpid())], capture_output=True, text=True, timeout=120)
        torch.cuda.synchronize()
        line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        r = json.loads(line[0][7:]) if line else {"rc": p.returncode, "stderr": p.stderr[-1500:]}
        r["parent_saw_write"] = float(x.sum()) - before
        r["seconds"] = round(time.time() - t0, 2)
        out[mode] = r
        print(mode, json.dumps(r))
    json.dump({"info": info, "variants": out}, open(os.environ.get("OUT", "/tmp") + "/probe_isolation.json", "w"), indent=1)

if __name__ == "__main__":
    main()
