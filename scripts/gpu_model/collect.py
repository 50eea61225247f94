"""`--collect`: runs the small configurations on the SIMT emulator build (counters.jsonl) and
the host attention measurement on the CPU build (cpu-attn.jsonl).
"""
import json
import os
import subprocess
import sys
import time

from .checkpoint import make_model
from .params import EMU_SHAPE, FIT_GEN
from .runs import kv_flags, plan


def collect(args):
    # scripts/gpu_model/collect.py -> the repository root
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    emu = args.emu_bin or os.path.join(root, "build-emu", "tandem")
    cpu = args.cpu_bin or os.path.join(root, "build", "tandem")
    t0 = time.time()
    if not args.skip_emulator:
        if not os.access(emu, os.X_OK):
            sys.exit("gpu_model: no emulator binary %s (build it with -DTANDEM_CUDA=EMULATE)"
                     % emu)
        models = args.models_dir or os.path.join(os.path.dirname(emu), "gpu-model-models")
        os.makedirs(args.counters_out, exist_ok=True)
        out = os.path.join(args.counters_out, "counters.jsonl")
        lines, running, todo = [], [], list(plan())
        env = dict(os.environ, TANDEM_EMU_PROTECT="0")  # no page protection: faster copies
        while todo or running:
            while todo and len(running) < args.jobs:
                p = todo.pop(0)
                mdir = os.path.join(models, "l8b-f%d-L%d-V%d" % (EMU_SHAPE["ffn"], p["layers"],
                                                                  p["vocab"]))
                make_model(mdir, p["layers"], p["vocab"], EMU_SHAPE)
                depths = ",".join(str(c - FIT_GEN) for c in p["ctxs"])
                cmd = [emu, "bench-decode", "--model", mdir, "--device", "cuda", "--fill",
                       "import", "--depth", depths, "--gen", str(FIT_GEN), "--batch",
                       ",".join(str(b) for b in p["batches"])] + kv_flags(p["mode"])
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, env=env)
                running.append((p, cmd, proc, time.time()))
            p, cmd, proc, ts = running.pop(0)
            stdout, stderr = proc.communicate()
            if proc.returncode != 0:
                sys.exit("gpu_model: %s failed:\n%s" % (" ".join(cmd), stderr[-4000:]))
            for line in stdout.splitlines():
                if not line.startswith("{"):
                    continue
                j = json.loads(line)
                if "emulator" not in j and not args.time_only:
                    sys.exit("gpu_model: no \"emulator\" key in the bench-decode output: %s"
                             % line[:200])
                rec = dict(source="emulator", mode=p["mode"], layers=p["layers"],
                           vocab=p["vocab"], batch=j["batch"], depth=j["depth"], gen=FIT_GEN,
                           window=j.get("window", 0), emulator=j.get("emulator"),
                           ffn=EMU_SHAPE["ffn"],
                           bench={k: j[k] for k in ("ms_per_step", "device", "kv", "cpu_attn")
                                  if k in j})
                lines.append(json.dumps(rec, sort_keys=True))
            print("gpu_model: %s L=%d V=%d batches %s contexts %s: %.0f s"
                  % (p["mode"], p["layers"], p["vocab"], p["batches"], p["ctxs"],
                     time.time() - ts), file=sys.stderr)
        lines.sort()
        if args.time_only:
            print("gpu_model: --time-only: %.0f s, nothing written" % (time.time() - t0),
                  file=sys.stderr)
            return
        with open(out, "w") as f:
            f.write("\n".join(lines) + "\n")
        print("gpu_model: wrote %s (%.0f s)" % (out, time.time() - t0), file=sys.stderr)
    if not args.skip_cpu:
        if not os.access(cpu, os.X_OK):
            sys.exit("gpu_model: no CPU binary %s (scripts/build.sh)" % cpu)
        up0 = open("/proc/loadavg").read().split()[:3]
        cmd = [cpu, "bench-cpu-attn", "--contexts", "4096,16384", "--batch", "1", "--dtypes",
               "bf16", "--threads", "1,0", "--min-time", "0.3"]
        r = subprocess.run(cmd, capture_output=True, text=True, check=True)
        up1 = open("/proc/loadavg").read().split()[:3]
        cpuinfo = [ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                   if ln.startswith("model name")][:1]
        head = {"collected": {"command": " ".join(["build/tandem"] + cmd[1:]),
                              "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                              "cpu": cpuinfo[0] if cpuinfo else "?",
                              "nproc": os.cpu_count(),
                              "loadavg_before": up0, "loadavg_after": up1}}
        with open(args.cpu_attn_out, "w") as f:
            f.write(json.dumps(head, sort_keys=True) + "\n" + r.stdout)
        print("gpu_model: wrote %s" % args.cpu_attn_out, file=sys.stderr)
