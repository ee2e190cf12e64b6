"""PCMM (plaintext x encrypted matrix) as exact modular GEMMs vs float64 GEMM and rotations.

    python -m hemlp.bench pcmm [--preset N14-d6[,N14-pcmm]] [--level 1] [--sizes 256,1024] [--threads 1,2] --json PATH

For d1 = d2 = d and d3 in {N/2 (slots), N, 4N}, times one PCMM per format at the given level
(the lowest level a rescaled PCMM can run at is 1; --level 0 --no-rescale times the unrescaled products of
compile(..., final_rescale=False), scale in.scale * Delta_U under q_0):
  rlwe       k = 1, slot encoding for d3 = N/2, coefficient encoding for d3 >= N
  mlwe       k = 2 rows per ciphertext for d3 = N/2 (coefficient encoding, ModPack included)
  msrlwe     shared a-part for d3 = 4N (k' = 4), online (a- and b-part GEMMs)
  msrlwe+pre the same with U*A precomputed (b-part GEMM only)
next to numpy's float64 GEMM of the same shape (d x d @ d x d3) and the ratio. The GEMM runs with
the same thread count as the PCMM: ``hemlp.set_num_threads`` does not reach numpy's own (bundled)
OpenBLAS, so the baseline is capped with ``threadpoolctl.threadpool_limits`` and the BLAS thread
counts seen inside the cap are recorded (``gemm_blas_threads``); CPU seconds are recorded beside wall time
(``pcmm_cpu_s``, ``gemm_cpu_s``, ``cpu_ratio``: at one thread the ratio a loaded machine does not skew). Rows of the
encrypted matrix repeat a few distinct encryptions (the timing does not depend on the data);
each product is checked against numpy on its first rows. `--baseline` adds the Halevi–Shoup
diagonal method (hemlp.baselines) for the d3 = N/2 shape when that module is present.

`--fresh` (d list, default 256) adds d x d @ Enc(d x N/2) from a fresh ciphertext, a batch of N/2 samples:
  fresh-top      encrypt_matrix's default level (the top of the chain) and pcmm.pcmm as is: every prime
  compiled       hemlp.compile of the one-layer model (layout A): the client encrypts at the planned level (1),
                 the server's run (cm.run) is timed
  compiled-L0    the same with final_rescale=False: the layer runs unrescaled at level 0 (weights quantised to fit
                 q_0; the row records the bits used)
"""
from __future__ import annotations

import math
import time

import numpy as np

from hemlp.apps.bench import measure, report  # noqa: F401

HELP = "PCMM formats vs float64 GEMM (and the rotation baseline)"


def add_arguments(p) -> None:
    p.add_argument("--preset", default="N14-d6", help="a preset, or a comma list run side by side (rows name it)")
    p.add_argument("--allow-insecure", action="store_true")
    p.add_argument("--level", type=int, default=1)
    p.add_argument("--sizes", default="256,1024", help="comma list of d1 = d2 (4096 is heavy: ~10 GB)")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--d3", default="N/2,N,4N", help="comma list of column counts among N/2, N, 4N")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--weight-bits", type=int, default=12)
    p.add_argument("--no-rescale", action="store_true",
                   help="products without their rescale (with --level 0: the unrescaled final layer of final_rescale=False)")
    p.add_argument("--baseline", action="store_true")
    p.add_argument("--fresh", default="256", help="comma list of d for the fresh-ciphertext rows ('' for none)")
    p.add_argument("--json", default=None)


def _bits(err) -> float:
    e = float(np.max(np.abs(err)))
    return math.inf if e == 0 else -math.log2(e)


def _blas_threads() -> list:
    """(library, threads) of every BLAS loaded in the process, as threadpoolctl sees them now."""
    from threadpoolctl import threadpool_info

    return [{"lib": d.get("filepath", "").rsplit("/", 1)[-1], "internal_api": d.get("internal_api"),
             "num_threads": d.get("num_threads")} for d in threadpool_info() if d.get("user_api") == "blas"]


def fp64_gemm_seconds(U, A, threads: int, repeats: int) -> tuple[float, list]:
    """Median time of numpy's U @ A with every BLAS capped at `threads`, and the caps as seen."""
    t, seen, _ = fp64_gemm_times(U, A, threads, repeats)
    return t, seen


def fp64_gemm_times(U, A, threads: int, repeats: int) -> tuple[float, list, float]:
    """fp64_gemm_seconds plus the median CPU seconds (the load-robust figure at one thread)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=threads, user_api="blas"):
        seen = _blas_threads()
        m = measure(lambda: U @ A, repeats)
    return m["median_s"], seen, m["cpu_median_s"]


def _tile_rows(cts_by_row, d2):
    return [cts_by_row[i % len(cts_by_row)] for i in range(d2)]


def main(args) -> int:
    try:
        import threadpoolctl  # noqa: F401
    except ImportError:
        print("hemlp.bench pcmm needs threadpoolctl to run the fp64 baseline on the same thread count "
              "(pip install threadpoolctl, or the hemlp[dev] extra)")
        return 2
    warn = report.busy_warning()
    if warn:
        print("warning:", warn)
    presets = [p.strip() for p in args.preset.split(",") if p.strip()]
    results, rows = [], []
    for preset in presets:  # several presets: side by side in one run, each row naming its preset
        res, rws = run_preset(preset, args)
        if len(presets) > 1:
            for r in res:
                r["preset"] = preset
            rws = [[f"{r[0]} [{preset}]"] + r[1:] for r in rws]
        results += res
        rows += rws
    report.table(["shape", "format", "thr", "PCMM", "fp64 GEMM", "ratio", "bits"], rows,
                 title=f"PCMM at level {args.level} ({args.preset}, weights {args.weight_bits} bits)")
    if args.json:
        report.write_json(args.json, "pcmm", {"preset": args.preset, "results": results,
                                              "notes": [warn] if warn else []})
    return 0


def run_preset(preset: str, args) -> tuple[list, list]:
    """Every row of the benchmark for one preset: (results, table rows)."""
    import hemlp
    from hemlp import fhe, pcmm

    ctx = fhe.Context(fhe.Params.preset(preset), allow_insecure=args.allow_insecure)
    sk, pk = ctx.keygen()
    N, slots, level = ctx.N, ctx.slots, args.level
    rng = np.random.default_rng(0)
    sizes = [int(s) for s in args.sizes.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    distinct = 8
    rows = []
    results = []
    mk = pcmm.modpack_keys(ctx, sk, 2)
    msk = pcmm.multi_secret_key(ctx, 4)
    for d in sizes:
        U = rng.normal(0, 1 / math.sqrt(d), (d, d))
        wanted = set(args.d3.split(","))
        for label, d3 in [(lab, v) for lab, v in (("N/2", slots), ("N", N), ("4N", 4 * N)) if lab in wanted]:
            setups = {}
            M = rng.uniform(-1, 1, (distinct, d3))
            if d3 == slots:
                base = pcmm.encrypt_matrix(ctx, M, sk, level=level)
                setups["rlwe"] = pcmm.CtMatrix(ctx, _tile_rows(base.cts, d), (d, d3), 1, "rlwe")
                mb = pcmm.encrypt_matrix(ctx, np.repeat(M, 1, axis=0), sk, format="mlwe", encoding="coeff",
                                           level=level)
                setups["mlwe"] = pcmm.CtMatrix(ctx, _tile_rows(mb.cts, d // 2), (d, d3), 1, "mlwe")
            elif d3 == N:
                base = pcmm.encrypt_matrix(ctx, M, sk, level=level, encoding="coeff")
                setups["rlwe"] = pcmm.CtMatrix(ctx, _tile_rows(base.cts, d), (d, d3), 1, "rlwe")
            else:
                # d distinct rows (one shared a-part per row: tiling would repeat a session's seeds); at d = 4096
                # the plaintext and its encryption take ~2 + ~2.5 GiB at level 0
                Mf = rng.uniform(-1, 1, (d, d3))
                C = pcmm.encrypt_matrix(ctx, Mf, msk, level=level, encoding="coeff")
                setups["msrlwe"] = C
                setups["msrlwe+pre"] = C
                base = pcmm.encrypt_matrix(ctx, M, sk, level=level, encoding="coeff")
                setups["rlwe"] = pcmm.CtMatrix(ctx, [base.cts[(i % distinct) * 4 + j] for i in range(d)
                                                       for j in range(4)], (d, d3), 4, "rlwe")
            A = rng.uniform(-1, 1, (d, d3))
            for th in threads:
                hemlp.set_num_threads(th)
                t_gemm, gemm_blas, c_gemm = fp64_gemm_times(U, A, th, args.repeats)
                for fmt, C in setups.items():
                    kw = dict(weight_bits=args.weight_bits)
                    if args.no_rescale:
                        kw["rescale"] = False
                    if fmt == "mlwe":
                        kw["keys"] = mk
                    if fmt == "msrlwe+pre":
                        t0 = time.perf_counter()
                        kw["precomputed"] = pcmm.PcmmPrecomputed(U, ctx, C.session, C.level, args.weight_bits,
                                                                 rescale=not args.no_rescale)
                        t_pre = time.perf_counter() - t0
                    out = pcmm.pcmm(U, C, **kw)
                    m = measure(lambda: pcmm.pcmm(U, C, **kw), args.repeats)
                    # correctness on the first rows
                    if fmt.startswith("msrlwe"):
                        got = pcmm.decrypt_matrix(ctx, out, msk)[:4]
                        want = U[:4] @ Mf
                    else:
                        got = pcmm.decrypt_matrix(ctx, out, sk)[:4]
                        Mt = np.stack([M[i % distinct] for i in range(d)])
                        if fmt == "rlwe" and d3 == 4 * N:
                            Mt = np.stack([M[i % distinct] for i in range(d)])
                        want = U[:4] @ Mt
                    rec = dict(d=d, d3=d3, d3_label=label, format=fmt, threads=th, pcmm_s=m["median_s"],
                               gemm_s=t_gemm, gemm_blas_threads=gemm_blas, ratio=m["median_s"] / t_gemm,
                               pcmm_cpu_s=m["cpu_median_s"], gemm_cpu_s=c_gemm, cpu_ratio=m["cpu_median_s"] / c_gemm,
                               bits=_bits(got - want),
                               level=level, weight_bits=args.weight_bits, rescale=not args.no_rescale)
                    if fmt == "msrlwe+pre":
                        rec["precompute_s"] = t_pre
                    results.append(rec)
                    rows.append([f"{d}x{d} @ {d}x{label}", fmt, th, report.fmt_seconds(m["median_s"]),
                                 report.fmt_seconds(t_gemm), report.fmt_ratio(rec["ratio"]),
                                 report.fmt_bits(rec["bits"])])
    for d in [int(v) for v in args.fresh.split(",") if v.strip()]:
        results_f, rows_f = _fresh_rows(ctx, sk, d, threads, args, rng, preset)
        results += results_f
        rows += rows_f
    if args.baseline:
        # Halevi-Shoup diagonals (BSGS, hoisted) on the d3 = N/2 shape: the d x d3 batch packs as d-slot
        # blocks, slots/d vectors per ciphertext, so d3*d/slots independent column-packs of equal work.
        # One pack is timed on the real path; the total is that time times the number of packs.
        from hemlp.baselines import halevi_shoup as hs

        for d in sizes:
            U = rng.normal(0, 1 / math.sqrt(d), (d, d))
            gks = ctx.rotation_keys(sk, hs.rotation_steps(U, slots))
            X = rng.uniform(-1, 1, (d, slots // d))
            ct = hs.pack(ctx, X, pk, d, level=level)[0]
            for th in threads:
                hemlp.set_num_threads(th)
                m = measure(lambda: hs.matvec(ctx, U, ct, gks), args.repeats)
                packs = d  # d3 = slots columns, slots // d per pack
                got = hs.unpack(ctx, [hs.matvec(ctx, U, ct, gks)], sk, d, X.shape[1], d)
                total = m["median_s"] * packs
                t_gemm = next(r["gemm_s"] for r in results if r["d"] == d and r["d3"] == slots and r["threads"] == th)
                rec = dict(d=d, d3=slots, d3_label="N/2", format="halevi-shoup", threads=th, pcmm_s=total,
                           per_pack_s=m["median_s"], packs=packs, gemm_s=t_gemm, ratio=total / t_gemm,
                           bits=_bits(got - U @ X), level=level)
                results.append(rec)
                rows.append([f"{d}x{d} @ {d}xN/2", "HS diagonals", th,
                             f"{report.fmt_seconds(total)} ({packs} x {report.fmt_seconds(m['median_s'])})",
                             report.fmt_seconds(t_gemm), report.fmt_ratio(rec["ratio"]), report.fmt_bits(rec["bits"])])
    return results, rows


def _fresh_rows(ctx, sk, d: int, threads: list, args, rng, preset: str) -> tuple[list, list]:
    """d x d @ Enc(d x N/2) from a fresh ciphertext: at the top level as encrypt_matrix makes it, and through the
    compiler (the client encrypts at the planned level; final_rescale True and False)."""
    import warnings

    import torch

    import hemlp
    from hemlp import pcmm
    from hemlp.errors import LevelError

    slots = ctx.slots
    U = rng.normal(0, 1 / math.sqrt(d), (d, d))
    X = rng.uniform(-1, 1, (slots, d))   # the batch: one sample per slot, d features
    A = X.T.copy()
    layer = torch.nn.Sequential(torch.nn.Linear(d, d, bias=False)).eval()
    with torch.no_grad():
        layer[0].weight.copy_(torch.as_tensor(U))
    compiled, results, rows = {}, [], []
    for name, fr in (("compiled", True), ("compiled-L0", False)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cm = hemlp.compile(layer, X, batch_size=slots, preset=preset, layout="batch",
                                   weight_bits=args.weight_bits, final_rescale=fr, allow_insecure=args.allow_insecure)
        except LevelError as exc:  # q_0 too small for the unrescaled output at >= 6 weight bits: recorded
            results.append(dict(d=d, d3=slots, d3_label="N/2", format="rlwe", path=name, fresh=True, skipped=str(exc)))
            rows.append([f"{d}x{d} @ {d}xN/2 fresh", name, "-", "skipped", "-", "-", "-"])
            continue
        csk, ek = cm.keygen()
        compiled[name] = (cm, csk, ek, cm.encrypt(X, csk))
    top = pcmm.encrypt_matrix(ctx, A, sk)     # the top level: encrypt_matrix's default
    for th in threads:
        hemlp.set_num_threads(th)
        t_gemm, gemm_blas, c_gemm = fp64_gemm_times(U, A, th, args.repeats)
        runs = {"fresh-top": (lambda: pcmm.pcmm(U, top, weight_bits=args.weight_bits), top.level, args.weight_bits,
                              lambda out: pcmm.decrypt_matrix(ctx, out, sk))}
        for name, (cm, csk, ek, ct) in compiled.items():
            last = next(s for s in cm.steps if s.op == "pcmm")
            runs[name] = ((lambda cm=cm, ek=ek, ct=ct: cm.run(ct, ek)), cm.plan.info["top_level"],
                          last.info.weight_bits or args.weight_bits,
                          (lambda out, cm=cm, csk=csk: cm.decrypt(out, csk).T))
        for name, (fn, level, bits, dec) in runs.items():
            out = fn()
            m = measure(fn, args.repeats)
            err = dec(out) - U @ A
            rec = dict(d=d, d3=slots, d3_label="N/2", format="rlwe", path=name, threads=th, pcmm_s=m["median_s"],
                       gemm_s=t_gemm, gemm_blas_threads=gemm_blas, ratio=m["median_s"] / t_gemm, bits=_bits(err),
                       level=level, weight_bits=bits, fresh=True, pcmm_cpu_s=m["cpu_median_s"], gemm_cpu_s=c_gemm,
                       cpu_ratio=m["cpu_median_s"] / c_gemm)
            results.append(rec)
            rows.append([f"{d}x{d} @ {d}xN/2 fresh", f"{name} (L{level})", th, report.fmt_seconds(m["median_s"]),
                         report.fmt_seconds(t_gemm), report.fmt_ratio(rec["ratio"]) + f" (CPU {rec['cpu_ratio']:.1f}x)",
                         report.fmt_bits(rec["bits"])])
    return results, rows
