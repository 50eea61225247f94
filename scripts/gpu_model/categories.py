"""Kernel categories and the flat form of one run's counters.

The fit, the time model and the document all see a run as a flat dict: the step's own fields
plus "category.field" sums over the kernels of each family (GEMV, attention, merge, ...).
"""


CATEGORIES = (("gemv", "gemv"), ("attention", "attention_kernel"),
              ("attention", "attention_batch"), ("combine", "combine"), ("merge", "merge"),
              ("convert", "convert"), ("scatter", "scatter"), ("flag", "_flag_kernel"),
              ("norm", "norm"), ("rope", "rope"), ("elementwise", "elementwise"),
              ("embedding", "embedding"))
CAT_NAMES = tuple(dict.fromkeys(c for c, _ in CATEGORIES)) + ("other",)
CAT_FIELDS = ("launches", "device_read_bytes", "device_write_bytes", "mapped_read_bytes",
              "mapped_write_bytes")
STEP_FIELDS = ("launches", "copies", "h2d_bytes", "d2h_bytes", "d2d_bytes", "memset_bytes",
               "host_syncs", "kernel_device_read_bytes", "kernel_device_write_bytes",
               "kernel_mapped_read_bytes", "kernel_mapped_write_bytes", "cublas_calls",
               "cublas_flops", "cublas_bytes", "h2d_copies", "d2h_copies", "d2d_copies")


def structural_keys():
    """Counters that do not depend on the FFN width: what the fit carries to the target."""
    keys = ["launches", "copies", "h2d_bytes", "d2h_bytes", "d2d_bytes", "memset_bytes",
            "host_syncs",
            "kernel_mapped_read_bytes", "kernel_mapped_write_bytes", "cublas_calls",
            "h2d_copies", "d2h_copies", "d2d_copies"]
    for cat in CAT_NAMES:
        keys += ["%s.launches" % cat, "%s.mapped_read_bytes" % cat,
                 "%s.mapped_write_bytes" % cat]
    return keys


def category(name):
    for cat, key in CATEGORIES:
        if key in name:
            return cat
    return "other"


def flatten(em):
    """One run's counters as a flat dict: step fields and category.field."""
    out = {k: float(em["per_step"].get(k, 0) or 0) for k in STEP_FIELDS}
    for cat in CAT_NAMES:
        for fld in CAT_FIELDS:
            out["%s.%s" % (cat, fld)] = 0.0
    for name, e in em.get("kernels_per_step", em.get("kernels", {})).items():
        cat = category(name)
        for fld in CAT_FIELDS:
            out["%s.%s" % (cat, fld)] += float(e.get(fld, 0) or 0)
    # The per-kernel table holds totals over the run's steps or per-step values: per step.
    steps = max(1, em.get("steps", 1))
    launches = sum(out["%s.launches" % c] for c in CAT_NAMES)
    if launches > out["launches"] * 1.5:
        for k in list(out):
            if "." in k:
                out[k] /= steps
    return out

