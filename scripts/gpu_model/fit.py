"""The fit: each counter as an exact linear function of layers, sequences, vocabulary and
context tokens, solved from the small runs and checked on held-out ones.
"""
from fractions import Fraction

from .categories import flatten
from .params import FIT_CTX, FIT_VOCAB, HELD_CTX, MODES, REGIMES


def features(L, B, V, T):
    return [1, B, V, V * B, L, L * B, L * B * T]


def solve(rows, rhs):
    """Exact solution of a square linear system (Fractions, Gauss-Jordan)."""
    n = len(rows)
    a = [[Fraction(x) for x in r] + [Fraction(y)] for r, y in zip(rows, rhs)]
    for c in range(n):
        p = next((r for r in range(c, n) if a[r][c] != 0), None)
        if p is None:
            raise ValueError("singular design")
        a[c], a[p] = a[p], a[c]
        for r in range(n):
            if r != c and a[r][c] != 0:
                f = a[r][c] / a[c][c]
                a[r] = [x - f * y for x, y in zip(a[r], a[c])]
    return [a[i][n] / a[i][i] for i in range(n)]


def design(mode):
    """GEMV regime: 7 runs solve the 7 features, 2 more are held out. cuBLAS regime: the
    change from the GEMV regime's structure (a conversion launch and a cuBLAS call instead of
    a GEMV per matmul) as d0 + d1 * L from 2 runs, a third held out."""
    b1, b2 = REGIMES["gemv"]
    c1, c2 = REGIMES["gemm"]
    v1, v2 = FIT_VOCAB
    t1, t2 = FIT_CTX[mode]
    t3 = HELD_CTX[mode]
    fit = [(1, b1, v1, t1), (1, b2, v1, t1), (2, b1, v1, t1), (2, b2, v1, t1), (1, b1, v1, t2),
           (1, b1, v2, t1), (1, b2, v2, t1)]
    held = [(1, b2, v1, t2), (1, b1, v1, t3), (1, b2, v1, t3)]
    gemm_fit = [(1, c1, v1, t1), (2, c1, v1, t1)]
    gemm_held = [(1, c2, v1, t1)]
    return fit, held, gemm_fit, gemm_held


class Fit:
    """Per mode: each counter as an exact linear function of FEATURES (GEMV regime), plus
    d0 + d1 * L for the cuBLAS regime."""

    def __init__(self, runs):
        self.coef, self.delta, self.check, self.source = {}, {}, {}, set()
        self.has_copies = False
        by = {}
        for r in runs:
            self.source.add(r.get("source", "?"))
            ps = r["emulator"]["per_step"]
            self.has_copies |= "copies" in ps  # emulators since f5e82e8 count copy calls
            ctx = r["depth"] + r["gen"]
            by[(r["mode"], r["layers"], r["batch"], r["vocab"], ctx)] = flatten(r["emulator"])
        self.by = by
        for mode in MODES:
            fit, held, gfit, gheld = design(mode)
            missing = [p for p in fit + gfit if (mode,) + p not in by]
            if missing:
                raise SystemExit("gpu_model: the counters lack the runs (L, B, V, T) %s of %s"
                                 % (missing, mode))
            keys = sorted(by[(mode,) + fit[0]])
            rows = [features(*q) for q in fit]
            coef = {k: solve(rows, [by[(mode,) + q][k] for q in fit]) for k in keys}
            self.coef[mode] = coef

            def gemv(k, q):
                return sum(c * f for c, f in zip(coef[k], features(*q)))

            delta = {}
            for k in keys:
                d = [Fraction(by[(mode,) + q][k]) - gemv(k, q) for q in gfit]
                d1 = (d[1] - d[0]) / (gfit[1][0] - gfit[0][0])
                delta[k] = (d[0] - d1 * gfit[0][0], d1)
            self.delta[mode] = delta
            for regime, pts in (("gemv", held), ("gemm", gheld)):
                worst = {}
                for q in pts:
                    if (mode,) + q not in by:
                        continue
                    got = by[(mode,) + q]
                    pred = self.at(mode, *q)
                    for k in keys:
                        err = abs(pred[k] - got[k]) / max(abs(got[k]), 1.0)
                        if err >= worst.get(k, (-1, None))[0]:
                            worst[k] = (err, q)
                self.check[(mode, regime)] = worst

    def at(self, mode, L, B, V, T):
        f = features(L, B, V, T)
        out = {}
        for k, cs in self.coef[mode].items():
            v = sum(c * x for c, x in zip(cs, f))
            if B > 8:
                d0, d1 = self.delta[mode][k]
                v += d0 + d1 * L
            out[k] = float(v)
        return out
