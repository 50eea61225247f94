"""Host attention from the measurement (`bench-cpu-attn` JSON lines), scaled to the GPU
server's cores and socket bandwidth.
"""
import json


class CpuAttn:
    def __init__(self, path, cores, cap_gbs, call_us):
        self.head, self.machine, self.rows = {}, {}, []
        for line in open(path):
            line = line.strip()
            if not line:
                continue
            j = json.loads(line)
            if "collected" in j:
                self.head = j["collected"]
            elif "context" in j and j.get("kv_dtype") == "bf16" and not j.get("skipped"):
                self.rows.append(j)
            elif "read_bw_gbs" in j:
                self.machine = j
        one = sorted((r for r in self.rows if r["threads"] == 1 and r["batch"] == 1),
                     key=lambda r: r["context"])
        allc = sorted((r for r in self.rows if r["threads"] > 1 and r["batch"] == 1),
                      key=lambda r: r["context"])
        if len(one) < 2 or not allc:
            raise SystemExit("gpu_model: %s needs bf16 batch-1 rows at two contexts for one "
                             "thread and for all cores" % path)
        # The rate: all cores of this machine on the largest context (KV far beyond the
        # caches), best call: the least disturbed by other jobs on this shared machine.
        big = allc[-1]
        self.big = big
        self.cores_measured = big["threads"]
        self.all_cores_gbs = big["kv_gbs_best"]
        self.per_core_gbs = self.all_cores_gbs / self.cores_measured
        self.one_core_gbs = one[-1]["kv_gbs_best"]
        self.overhead_s = call_us * 1e-6
        self.cores, self.cap_gbs = cores, cap_gbs
        self.rate_gbs = min(cores * self.per_core_gbs, cap_gbs)
        self.bound = "cores" if cores * self.per_core_gbs < cap_gbs else "socket bandwidth"

    def seconds(self, nbytes):
        """One host attention call (one sequence, one layer) on the GPU server."""
        return self.overhead_s + nbytes / (self.rate_gbs * 1e9)
