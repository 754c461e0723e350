#!/usr/bin/env python3
"""Fits the piecewise polynomials of gg::simd::erf and writes ops/cpu/erf_table.h.

    /usr/bin/python3 tools/fit_erf.py > ops/cpu/erf_table.h

Two tables of the same accuracy, one for each way a vector unit looks up a coefficient;
ops/cpu/simd.h takes the one that was measured faster on the build's ISA (and its scalar path
the same one, so a kernel's SIMD body and tail agree bit for bit):

- narrow (erf_narrow_*: AVX2, SSE, the scalar build): 4 intervals of degree 9,
  i = min(floor(a + 0.5), 3), every lookup one in-lane permute of a four-float table
  (vpermilps). Interval 0, [0, 0.5): erf(a) = a * P(a^2), P of degree 6 (its higher
  coefficients 0: a degree-9 fit there is ill-conditioned), fitted to erf(a)/a with
  P(0) = 2/sqrt(pi) rounded first, so tiny arguments keep their relative accuracy;
  intervals 1 and 2, [i - 0.5, i + 0.5), and 3, [2.5, 3.92): P(a - i), a - i exact
  (Sterbenz). On a Zen 3 (AVX2) 0.90 ns a value, against 1.40 with the wide table, whose
  lookups there take two cross-lane permutes and a blend.
- wide (erf_wide_*: AVX-512): 16 intervals [i/4, (i+1)/4) of degree 7 in t = a - center[i],
  i = min(floor(4a), 15); a sixteen-float table is one register, every lookup one
  cross-lane permute (vpermps), and there are fewer terms: on an Intel Xeon (family 6
  model 167) 0.263 ns a value, against 0.355 with the narrow table. Interval 0 is odd,
  fitted for relative error as above (erf(a)/a in a^2).

Least squares on Chebyshev nodes, rounded to float. From 3.9192059 on (erf_one_from) erf
rounds to 1 in float and the kernel returns exactly 1. The script evaluates each table
exactly as the kernel does (float32 Horner with fused multiply-adds) on 220,000 points and
prints the worst absolute and relative (ulp) errors against math.erf into the header.
"""
import math

import numpy as np


def f32(x):
    return np.float32(x)


def fma32(a, b, c):  # a float32 fused multiply-add: the product is exact in double
    return np.float32(np.float64(a) * np.float64(b) + np.float64(c))


def one_from():  # the least float a whose erf rounds to 1 in float
    a = np.float32(3.8)
    while np.float32(math.erf(float(a))) != np.float32(1):
        a = np.nextafter(a, np.float32(5))
    return a


ONE_FROM = one_from()
C0 = float(f32(2 / math.sqrt(math.pi)))  # erf(a)/a at 0, rounded first


def nodes(lo, hi, n):  # n Chebyshev nodes on [lo, hi] and erf there
    k = np.arange(n)
    x = (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / n)
    return x, np.array([math.erf(v) for v in x])


def lstsq(columns, y):
    return list(np.linalg.lstsq(np.stack(columns, 1), y, rcond=None)[0])


def horner(c, t):  # sum over d of c[d] * t^d in float32 with fused multiply-adds, as the kernel
    p = c[-1]
    for d in range(len(c) - 2, -1, -1):
        p = fma32(p, t, c[d])
    return p


class Narrow:  # 4 intervals of degree 9; interval 0 is a * P(a^2)
    name, DEG, NI, DEG0 = "narrow", 9, 4, 6
    centers = None  # t = a - i: no table of centres

    def fit(self):
        self.coefs = []
        for i in range(self.NI):
            lo, hi = max(0.0, i - 0.5), (i + 0.5 if i < self.NI - 1 else float(ONE_FROM))
            x, y = nodes(lo, hi, 600)
            if i == 0:
                z = x * x
                s = lstsq([z ** p for p in range(1, self.DEG0 + 1)], y / x - C0)
                cc = [C0] + s + [0.0] * (self.DEG - self.DEG0)
            else:
                cc = lstsq([(x - i) ** p for p in range(self.DEG + 1)], y)
            self.coefs.append([f32(v) for v in cc])

    def poly(self, x):  # the kernel's arithmetic for 0 <= x < ONE_FROM, step for step
        i = min(int(np.float32(x + np.float32(0.5))), self.NI - 1)
        t = np.float32(x * x) if i == 0 else np.float32(x - np.float32(i))
        p = horner(self.coefs[i], t)
        return np.float32(x * p) if i == 0 else p

    rule = ("i = min(floor(a + 0.5), 3), p = sum over d of coef[d][i] * t^d;\n"
            "// t = a * a and erf = a * p on interval 0, t = a - i and erf = p on the others")
    align = 16


class Wide:  # 16 intervals of degree 7 around their centres; interval 0 is odd
    name, DEG, NI, W = "wide", 7, 16, 0.25

    def fit(self):
        self.centers, self.coefs = [], []
        for i in range(self.NI):
            lo, hi = i * self.W, (i + 1) * self.W
            c = 0.0 if i == 0 else lo + self.W / 2
            x, y = nodes(lo, hi, 400)
            if i == 0:
                s = lstsq([x ** p for p in (2, 4, 6)], y / x - C0)
                cc = [0.0, C0, 0.0, s[0], 0.0, s[1], 0.0, s[2]]
            else:
                cc = lstsq([(x - c) ** p for p in range(self.DEG + 1)], y)
            self.centers.append(f32(c))
            self.coefs.append([f32(v) for v in cc])

    def poly(self, x):
        i = min(int(np.float32(x * np.float32(4))), self.NI - 1)
        return horner(self.coefs[i], np.float32(x - self.centers[i]))

    rule = "i = min(floor(4a), 15), erf = sum over d of coef[d][i] * t^d,\n// t = a - center[i]"
    align = 64


def erf32(a, scheme):
    x = np.float32(abs(a))
    if not x < ONE_FROM:
        return np.float32(math.copysign(1.0, a))
    p = scheme.poly(x)
    p = np.float32(1) if p > 1 else p
    return np.float32(math.copysign(float(p), a))


def errors(scheme):
    xs = np.concatenate([np.linspace(0, 4.5, 200001), np.geomspace(1e-30, 0.3, 20001)]).astype(np.float32)
    worst_abs = worst_ulp = 0.0
    for a in xs:
        ref = math.erf(float(a))
        e = abs(float(erf32(a, scheme)) - ref)
        worst_abs = max(worst_abs, e)
        worst_ulp = max(worst_ulp, e / float(np.spacing(np.float32(ref))))
    return worst_abs, worst_ulp


def lit(v):  # a float literal that reads back as exactly v
    s = "%.9g" % float(v)
    return s + ("f" if "." in s or "e" in s else ".0f")


def main():
    print("// Generated by tools/fit_erf.py: do not edit. The tables of gg::simd::erf (ops/cpu/simd.h),")
    print("// erf(a) for 0 <= a < erf_one_from; the script's docstring says which ISA takes which.")
    print("#pragma once\n\nnamespace gg::simd::detail {\n")
    print("inline constexpr float erf_one_from = %s;  // erf rounds to 1 in float from here on" % lit(ONE_FROM))
    for scheme in (Narrow(), Wide()):
        scheme.fit()
        worst_abs, worst_ulp = errors(scheme)
        n = "erf_" + scheme.name
        print("\n// %s: %d intervals of degree %d: %s." % (n, scheme.NI, scheme.DEG, scheme.rule))
        print("// Against math.erf on 220,000 points in [0, 4.5] and [1e-30, 0.3]: worst absolute")
        print("// error %.2e, worst relative error %.2f ulp." % (worst_abs, worst_ulp))
        print("inline constexpr int %s_degree = %d;" % (n, scheme.DEG))
        print("inline constexpr int %s_intervals = %d;" % (n, scheme.NI))
        if scheme.centers is not None:
            print("alignas(%d) inline constexpr float %s_center[%d] = {%s};"
                  % (scheme.align, n, scheme.NI, ", ".join(lit(c) for c in scheme.centers)))
        print("alignas(%d) inline constexpr float %s_coef[%d][%d] = {" % (scheme.align, n, scheme.DEG + 1, scheme.NI))
        for d in range(scheme.DEG + 1):
            print("    {%s}," % ", ".join(lit(scheme.coefs[i][d]) for i in range(scheme.NI)))
        print("};")
    print("\n}  // namespace gg::simd::detail")


if __name__ == "__main__":
    main()
